"""What the server acknowledged survives its crash (issue 20, part 4), with real processes: a
cancel answered 200 is carried out by the server that comes back, and a job run again after a
crash that took its replica too (its supervisor killed) counts its attempt and logs each line
once."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import httpx
from job_commands import JOB_PYTHON
from server_proc import ServerProc, stop_process, until
from test_agent_e2e import CLI, FAKE, NODE, SLEEP, _alive

HELLO = [JOB_PYTHON, "-c", "import time; print('hello', flush=True); time.sleep(60)"]


def _team(srv: ServerProc) -> dict[str, str]:
    """Tenant 'team' and its tokens: {'tenant': ..., 'agent': ...}."""
    admin = srv.headers()
    httpx.post(f"{srv.url}/v1/tenants", json={"name": "team"}, headers=admin).raise_for_status()
    tokens = {}
    for role in ("tenant", "agent"):
        r = httpx.post(f"{srv.url}/v1/tenants/team/tokens", json={"role": role}, headers=admin)
        r.raise_for_status()
        tokens[role] = r.json()["token"]
    return tokens


def _job(srv: ServerProc, job_id: int) -> dict[str, Any]:
    r = httpx.get(f"{srv.url}/v1/jobs/{job_id}", headers=srv.headers(), timeout=5)
    r.raise_for_status()
    return dict(r.json())


def _started(job: dict[str, Any]) -> list[str]:
    return [e["reason"] for e in job["events"] if e["reason"].startswith("started on")]


def test_a_cancel_acknowledged_before_a_crash_is_carried_out_after_it(tmp_path: Path) -> None:
    fast = ("--heartbeat", "0.2", "--lost-after", "60", "--lease", "30")  # outlasts the SIGSTOP
    srv = ServerProc(tmp_path / "data", extra_args=fast).start()
    agent: subprocess.Popen[bytes] | None = None
    try:
        tokens = _team(srv)
        how = ("--grace", "1", "--poll", "0.05", "--work-dir", str(tmp_path / "agent"))
        agent = subprocess.Popen(
            [*CLI, "agent", "--server", srv.url, "--node", NODE, "--fake", str(FAKE), *how],
            stdout=(tmp_path / "agent.log").open("wb"),
            stderr=subprocess.STDOUT,
            env={**os.environ, "XPUPOOL_TOKEN": tokens["agent"]},
        )
        user = {"Authorization": f"Bearer {tokens['tenant']}"}
        r = httpx.post(f"{srv.url}/v1/jobs", json={"command": SLEEP, "spec": "A100"}, headers=user)
        assert r.status_code == 201, r.text
        job_id = int(r.json()["id"])
        until(lambda: _started(_job(srv, job_id)), "the job to start", 30)
        pid = int(_started(_job(srv, job_id))[0].rsplit("pid ", 1)[1].rstrip(")"))
        agent.send_signal(signal.SIGSTOP)  # the stop cannot be delivered
        r = httpx.post(f"{srv.url}/v1/jobs/{job_id}/cancel", headers=user)
        assert r.status_code == 200, r.text
        srv.kill()
        assert _alive(pid)  # the agent never heard of the cancel
        srv.start(same_port=True)
        agent.send_signal(signal.SIGCONT)
        job = until(
            lambda: (j := _job(srv, job_id))["state"] == "cancelled" and j,
            f"the cancel carried out after the restart ({_job(srv, job_id)['state']})",
            30,
        )
        until(lambda: not _alive(pid), "the process to be gone", 10)
        assert job["stop_cause"] == "cancelled"
        assert len(_started(job)) == 1 and job["attempts"] == 1  # it never ran again
    finally:
        if agent is not None:
            agent.send_signal(signal.SIGCONT)
            stop_process(agent)
        srv.stop()


def test_a_run_again_after_a_crash_counts_its_attempt_and_logs_each_line_once(
    tmp_path: Path,
) -> None:
    srv = ServerProc(tmp_path / "data", agent=True, extra_args=("--heartbeat", "0.2")).start()
    try:
        _team(srv)
        r = httpx.post(
            f"{srv.url}/v1/jobs", json={"command": HELLO, "tenant": "team"}, headers=srv.headers()
        )
        assert r.status_code == 201, r.text
        job_id = int(r.json()["id"])

        def log() -> str:
            got = httpx.get(f"{srv.url}/v1/jobs/{job_id}/logs", headers=srv.headers(), timeout=5)
            return got.text

        until(lambda: "hello" in log(), "the first run's output", 30)
        job = _job(srv, job_id)
        assert job["attempts"] == 1
        pid = int(_started(job)[0].rsplit("pid ", 1)[1].rstrip(")"))
        stat = Path(f"/proc/{pid}/stat").read_text()
        supervisor = int(stat[stat.rfind(")") + 2 :].split()[1])
        srv.kill()  # the in-process agent dies with the server; the replica with its supervisor
        os.kill(supervisor, signal.SIGKILL)
        until(lambda: not _alive(pid), "the replica gone with its supervisor", 10)
        srv.start()
        job = until(
            lambda: (j := _job(srv, job_id))["attempts"] == 2 and j,
            f"the second attempt ({_job(srv, job_id)['attempts']})",
            30,
        )
        until(lambda: log().count("hello") >= 2, "the second run's output", 30)
        text = log()
        assert text.count("hello") == 2, text
        first, second = text.split("[xpupool: attempt 2]\n")
        assert first.count("hello") == 1 and second.count("hello") == 1
        assert any("attempt 2" in e["reason"] for e in job["events"])
        cancel = httpx.post(f"{srv.url}/v1/jobs/{job_id}/cancel", headers=srv.headers())
        assert cancel.status_code == 200
    finally:
        srv.stop()
