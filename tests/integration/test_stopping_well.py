"""A job's grace and checkpoint signal against a real ``xpupool up`` whose in-process agent runs
real processes (issue 54 part 2): cancelled, a process that traps both signals sees the checkpoint
signal first, then SIGTERM, runs on through its grace and is killed. No timing is asserted: the
order of what it saw, and how many 0.1 s ticks it printed after SIGTERM (never more than the
time allows)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from job_commands import JOB_PYTHON
from server_proc import ServerProc, stop_process, until

pytestmark = pytest.mark.slow

FAKE = Path(__file__).parents[1] / "fixtures" / "agent" / "fake-a100x2.yaml"
SLEEPS = [JOB_PYTHON, "-c", "import time; print('up', flush=True); time.sleep(120)"]
SAVES = [
    JOB_PYTHON,
    "-c",
    "import os, time\n"
    "open(os.environ['XPUPOOL_CHECKPOINT_FILE'], 'w').close()\n"
    "print('saved', flush=True); time.sleep(120)\n",
]

TRAPS = [  # os.write: a handler that prints while the loop prints can raise "reentrant call"
    JOB_PYTHON,
    "-c",
    "import os, signal, time\n"
    "say = lambda word: os.write(1, word.encode() + b'\\n')\n"
    "signal.signal(signal.SIGUSR1, lambda *_: say('usr1'))\n"
    "signal.signal(signal.SIGTERM, lambda *_: say('term'))\n"
    "say('up')\n"
    "while True:\n"
    "    say('tick'); time.sleep(0.1)\n",
]


@pytest.fixture
def srv(tmp_path: Path) -> Iterator[ServerProc]:
    with ServerProc(tmp_path / "data", agent=True, extra_args=("--heartbeat", "0.2")) as server:
        r = httpx.post(f"{server.url}/v1/tenants", json={"name": "team"}, headers=server.headers())
        r.raise_for_status()
        yield server


def _job(srv: ServerProc, job_id: int) -> dict[str, Any]:
    r = httpx.get(f"{srv.url}/v1/jobs/{job_id}", headers=srv.headers(), timeout=5)
    return dict(r.json())


def _log(srv: ServerProc, job_id: int) -> str:
    return httpx.get(f"{srv.url}/v1/jobs/{job_id}/logs", headers=srv.headers(), timeout=5).text


def test_cancel_sends_the_checkpoint_signal_then_term_and_waits_out_the_grace(
    srv: ServerProc,
) -> None:
    body = {"tenant": "team", "command": TRAPS, "request": "grace=3s checkpoint-signal=USR1"}
    r = httpx.post(f"{srv.url}/v1/jobs", json=body, headers=srv.headers(), timeout=10)
    assert r.status_code == 201, r.text
    job_id = int(r.json()["id"])
    assert r.json()["request"]["grace"] == "3s"
    until(lambda: "up" in _log(srv, job_id).split(), "the job to start", 60)
    r = httpx.post(f"{srv.url}/v1/jobs/{job_id}/cancel", headers=srv.headers(), timeout=10)
    assert r.status_code == 200, r.text
    until(lambda: _job(srv, job_id)["state"] == "cancelled", "the job to be cancelled", 60)
    try:
        lines = until(lambda: "term" in (t := _log(srv, job_id)) and t.split(), "its log", 30)
    except AssertionError as exc:  # what it saw, and what the plane recorded, to tell why
        events = [(e["state"], e["reason"]) for e in _job(srv, job_id)["events"]]
        raise AssertionError(f"{exc}: log {_log(srv, job_id)[-600:]!r}; events {events}") from None
    assert lines.index("usr1") < lines.index("term")
    # it trapped SIGTERM and ran on through its grace, then was killed: at one tick per 0.1 s at
    # most, 60 ticks is 6 s, more than its 3 s and less than the in-process agent's own 10 s
    after_term = lines[lines.index("term") + 1 :].count("tick")
    assert 3 <= after_term <= 60, after_term


def test_min_run_and_a_checkpoint_file_decide_a_real_preemption(tmp_path: Path) -> None:
    """Two cards, two low jobs: one inside its min-run, one that touched its checkpoint file. A
    priority job preempts the second (the first is spared), and its event says it lost only the
    time since its checkpoint, which reached the plane through its agent's report."""
    with ServerProc(tmp_path / "data", extra_args=("--heartbeat", "0.2")) as srv:
        agent, agent_log = srv.start_agent(tmp_path, "n1", FAKE, "--grace", "1")
        try:
            with (
                srv.tenant_client("team") as team,
                httpx.Client(base_url=srv.url, headers=srv.headers(), timeout=10) as admin,
            ):
                queue = {"name": "team", "tenant": "team", "max_priority": 10}
                admin.put("/v1/queues/team", json=queue).raise_for_status()
                until(lambda: admin.get("/v1/nodes").json(), "the agent's node", 60)

                def submit(request: str, command: list[str], priority: int = 0) -> int:
                    body = {"request": request, "command": command, "priority": priority}
                    r = team.post("/v1/jobs", json=body)
                    assert r.status_code == 201, r.text
                    return int(r.json()["id"])

                def job(job_id: int) -> dict[str, Any]:
                    return dict(team.get(f"/v1/jobs/{job_id}").json())

                kept = submit("A100:1 min-run=1h", SLEEPS)
                saver = submit("A100:1", SAVES)
                for i in (kept, saver):
                    until(lambda i=i: job(i)["state"] == "running", f"job {i} to run", 90)
                until(lambda: job(saver)["checkpoint_at"] is not None, "its checkpoint", 60)
                assert job(kept)["checkpoint_at"] is None
                high = submit("A100:1", SLEEPS, priority=10)
                until(lambda: job(saver)["state"] == "pending", "the saver preempted", 90)
                until(lambda: job(high)["state"] in ("scheduled", "running"), "the high job", 90)
                assert job(kept)["state"] == "running"  # inside its min-run: spared
                why = next(e["reason"] for e in job(saver)["events"] if "preempted" in e["reason"])
                assert "since its checkpoint" in why, why
        finally:
            stop_process(agent)
            print(agent_log.read_text()[-2000:])
