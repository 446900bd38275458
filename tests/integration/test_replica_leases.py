"""Replica supervisors and leases with real processes (issue 20, part 3): a job runs once at a
time however its agent or server stops, and a restart adopts what still runs.

- an agent cut off from the server (SIGSTOP: alive, heartbeats not arriving): its replica's lease
  runs out and its supervisor stops it before the job starts on another node;
- SIGTERM or SIGKILL of ``xpupool up`` (in-process agent) or of a standalone agent, then a
  restart: the same process runs on, is adopted (one attempt, one start), its log is whole
  (each line once), and the job succeeds when it exits.

The job's processes run as a tenant's uid: the files they touch are in a directory under /var/lib
that every uid may use (pytest's own is private to root, and a job has a /tmp of its own).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from job_commands import JOB_PYTHON
from server_proc import ServerProc, stop_process, until
from test_agent_e2e import CLI, FAKE, _alive
from test_job_intent import _job, _started, _team

# Prints a numbered line every 0.1 s until the file named by its argument exists, then 'bye'.
LINES = (
    "import os, sys, time\n"
    "i = 0\n"
    "while not os.path.exists(sys.argv[1]):\n"
    "    print(f'line {i}', flush=True)\n"
    "    i += 1\n"
    "    time.sleep(0.1)\n"
    "print('bye', flush=True)\n"
)
# Appends the wall time to DIR/<node>-<pid> every 0.02 s, for as long as it runs.
MARKS = (
    "import os, sys, time\n"
    "path = os.path.join(sys.argv[1], os.environ['XPUPOOL_NODE'] + '-' + str(os.getpid()))\n"
    "with open(path, 'a') as f:\n"
    "    while True:\n"
    "        f.write(f'{time.time()}\\n')\n"
    "        f.flush()\n"
    "        time.sleep(0.02)\n"
)


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory the job's uid can write (mode 0777; not under /tmp, which a job has its own
    of: issue 43 item 12)."""
    path = Path(tempfile.mkdtemp(prefix="xpupool-lease-test-", dir="/var/lib"))
    path.chmod(0o777)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _pid(job: dict[str, Any]) -> int:
    found = re.search(r"\(pid (\d+)\)", _started(job)[0])
    assert found is not None
    return int(found.group(1))


def _log(srv: ServerProc, job_id: int) -> str:
    r = httpx.get(f"{srv.url}/v1/jobs/{job_id}/logs", headers=srv.headers(), timeout=5)
    return r.text if r.status_code == 200 else ""


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line]


def _check_whole(text: str) -> None:
    """Every numbered line once, in order, none missing, then 'bye' once; no second attempt."""
    lines = _lines(text)
    assert lines[-1] == "bye" and lines.count("bye") == 1, text[-2000:]
    numbered = lines[:-1]
    assert numbered == [f"line {i}" for i in range(len(numbered))], text[-2000:]
    assert "[xpupool: attempt" not in text


def _agent(
    srv: ServerProc, token: str, node: str, work_dir: Path, fake: Path, log: Path
) -> subprocess.Popen[bytes]:
    how = ("--grace", "1", "--poll", "0.05", "--work-dir", str(work_dir))
    return subprocess.Popen(
        [*CLI, "agent", "--server", srv.url, "--node", node, "--fake", str(fake), *how],
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
        env={**os.environ, "XPUPOOL_TOKEN": token},
    )


def _kill_leftovers(pid: int) -> None:
    """A test that fails half-way leaves no replica (or its supervisor) behind."""
    for p in (_parent(pid), pid):
        if p and _alive(p):
            os.kill(p, signal.SIGKILL)


def _parent(pid: int) -> int:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    return int(stat[stat.rfind(")") + 2 :].split()[1])


def test_a_cut_off_agents_replica_stops_before_the_job_runs_elsewhere(
    tmp_path: Path, shared_dir: Path
) -> None:
    settings = ("--heartbeat", "0.2", "--lost-after", "2", "--lease", "1")
    srv = ServerProc(tmp_path / "data", extra_args=settings).start()
    other_fake = tmp_path / "fake-b.yaml"
    other_fake.write_text(FAKE.read_text().replace("GPU-fake-a100", "GPU-fake-b100"))
    agents: list[subprocess.Popen[bytes]] = []
    pid = 0
    try:
        tokens = _team(srv)
        a = _agent(srv, tokens["agent"], "box-a", tmp_path / "a", FAKE, tmp_path / "a.log")
        agents.append(a)
        user = {"Authorization": f"Bearer {tokens['tenant']}"}
        until(
            lambda: (
                httpx.get(f"{srv.url}/v1/nodes/box-a", headers=srv.headers()).status_code == 200
            ),
            "box-a registered",
        )
        command = [JOB_PYTHON, "-c", MARKS, str(shared_dir)]
        r = httpx.post(
            f"{srv.url}/v1/jobs", json={"command": command, "spec": "A100"}, headers=user
        )
        assert r.status_code == 201, r.text
        job_id = int(r.json()["id"])
        until(lambda: list(shared_dir.glob("box-a-*")), "the run on box-a", 30)
        # the agent reports the start after the process runs: wait for the server to have it
        until(lambda: _started(_job(srv, job_id)), "its start recorded", 30)
        pid = _pid(_job(srv, job_id))
        r = httpx.post(
            f"{srv.url}/v1/tenants/team/tokens", json={"role": "agent"}, headers=srv.headers()
        )
        r.raise_for_status()  # a token speaks for the first node it registers: one per agent
        b = _agent(srv, r.json()["token"], "box-b", tmp_path / "b", other_fake, tmp_path / "b.log")
        agents.append(b)
        until(
            lambda: (
                httpx.get(f"{srv.url}/v1/nodes/box-b", headers=srv.headers()).status_code == 200
            ),
            "box-b registered",
        )
        a.send_signal(signal.SIGSTOP)  # alive, but no heartbeat reaches the server
        until(lambda: list(shared_dir.glob("box-b-*")), "the run on box-b", 60)
        first = [float(t) for t in next(shared_dir.glob("box-a-*")).read_text().split()]
        until(lambda: next(shared_dir.glob("box-b-*")).read_text().strip(), "box-b's marks")
        second = [float(t) for t in next(shared_dir.glob("box-b-*")).read_text().split()]
        assert max(first) < min(second)  # the two runs never overlapped
        assert not _alive(pid)  # stopped by its supervisor, its agent still frozen
        job = _job(srv, job_id)
        assert job["attempts"] == 2
        assert any("lease" in e["reason"] for e in job["events"])
        httpx.post(f"{srv.url}/v1/jobs/{job_id}/cancel", headers=user)
    finally:
        for agent in agents:
            agent.send_signal(signal.SIGCONT)
            stop_process(agent)
        srv.stop()
        if pid:
            _kill_leftovers(pid)


FAST_UP = ("--heartbeat", "0.2", "--lost-after", "60", "--lease", "30")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_a_restarted_server_adopts_the_running_replica(
    tmp_path: Path, shared_dir: Path, sig: signal.Signals
) -> None:
    srv = ServerProc(tmp_path / "data", agent=True, extra_args=FAST_UP).start()
    go = shared_dir / "go"
    pid = 0
    try:
        _team(srv)
        command = [JOB_PYTHON, "-c", LINES, str(go)]
        r = httpx.post(
            f"{srv.url}/v1/jobs", json={"command": command, "tenant": "team"}, headers=srv.headers()
        )
        assert r.status_code == 201, r.text
        job_id = int(r.json()["id"])
        until(lambda: "line 3" in _log(srv, job_id), "the run's output", 30)
        until(lambda: _started(_job(srv, job_id)), "its start recorded", 30)
        pid = _pid(_job(srv, job_id))
        if sig == signal.SIGTERM:
            srv.stop()
        else:
            srv.kill()
        assert _alive(pid)  # its supervisor keeps it running
        before = len(_lines((tmp_path / "data").joinpath("logs", str(job_id), "0.log").read_text()))
        srv.start()
        job = until(
            lambda: (
                (j := _job(srv, job_id))["state"] == "running"
                and any("adopted" in e["reason"] for e in j["events"])
                and j
            ),
            "the run adopted",
            30,
        )
        assert _alive(pid)
        until(lambda: len(_lines(_log(srv, job_id))) > before + 5, "its output shipped again")
        go.touch()
        job = until(lambda: (j := _job(srv, job_id))["state"] == "succeeded" and j, "its end", 30)
        assert job["attempts"] == 1 and len(_started(job)) == 1  # one run, never started again
        until(lambda: _log(srv, job_id).endswith("bye\n"), "the last line", 10)
        _check_whole(_log(srv, job_id))
    finally:
        go.touch()
        srv.stop()
        if pid:
            _kill_leftovers(pid)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_a_restarted_agent_adopts_the_running_replica(
    tmp_path: Path, shared_dir: Path, sig: signal.Signals
) -> None:
    srv = ServerProc(tmp_path / "data", extra_args=FAST_UP).start()
    go = shared_dir / "go"
    agent: subprocess.Popen[bytes] | None = None
    pid = 0
    try:
        tokens = _team(srv)
        work_dir = tmp_path / "agent"
        agent = _agent(srv, tokens["agent"], "gpu-box", work_dir, FAKE, tmp_path / "agent.log")
        user = {"Authorization": f"Bearer {tokens['tenant']}"}
        command = [JOB_PYTHON, "-c", LINES, str(go)]
        r = httpx.post(
            f"{srv.url}/v1/jobs", json={"command": command, "spec": "A100"}, headers=user
        )
        assert r.status_code == 201, r.text
        job_id = int(r.json()["id"])
        until(lambda: "line 3" in _log(srv, job_id), "the run's output", 30)
        until(lambda: _started(_job(srv, job_id)), "its start recorded", 30)
        pid = _pid(_job(srv, job_id))
        agent.send_signal(sig)
        agent.wait(20)
        assert _alive(pid)  # its supervisor keeps it running
        assert _job(srv, job_id)["state"] == "running"  # nothing reported that ends it
        agent = _agent(srv, tokens["agent"], "gpu-box", work_dir, FAKE, tmp_path / "agent.log")
        before = len(_lines(_log(srv, job_id)))
        until(lambda: len(_lines(_log(srv, job_id))) > before + 5, "its output shipped again")
        assert _alive(pid)
        go.touch()
        job = until(lambda: (j := _job(srv, job_id))["state"] == "succeeded" and j, "its end", 30)
        assert job["attempts"] == 1 and len(_started(job)) == 1
        until(lambda: _log(srv, job_id).endswith("bye\n"), "the last line", 10)
        _check_whole(_log(srv, job_id))
    finally:
        go.touch()
        if agent is not None:
            stop_process(agent)
        srv.stop()
        if pid:
            _kill_leftovers(pid)
