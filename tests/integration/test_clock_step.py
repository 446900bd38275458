"""A step of the wall clock neither restarts running work nor hides a dead node (issue 43, item 9).

A real ``xpupool up`` and a real ``xpupool agent`` (with the replica's supervisor) run under
libfaketime, Debian's ``faketime`` package, with only their wall clock faked
(``FAKETIME_DONT_FAKE_MONOTONIC``), as an NTP step or ``date -s`` moves it: the offset is read
from a file, so the test steps it while they run (``wall_clock.py``). Before the fix, the server timed
liveness with ``time.time()`` differences: one hour ahead between two heartbeats, the node was
marked lost and its running job requeued ("lease of its replicas over") while the replica still
ran; one hour back, a dead node stayed "ready" for an hour.
"""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path
from typing import Any

import httpx
from job_commands import JOB_PYTHON
from server_proc import ServerProc, stop_process, until
from test_agent_e2e import _alive
from wall_clock import WallClock

FAKE = Path(__file__).parents[1] / "fixtures" / "agent" / "fake-a100x2.yaml"
SLEEP = [JOB_PYTHON, "-c", "import time; print('sleeping', flush=True); time.sleep(300)"]
# heartbeats every 0.5 s, lost after 8 s: lease 6.4 s, grace 6.4 s, requeue after 13.8 s of silence
TIMING = ("--heartbeat", "0.5", "--lost-after", "8")
NODE = "clock-box"


def _job(user: httpx.Client, job_id: int) -> dict[str, Any]:
    r = user.get(f"/v1/jobs/{job_id}")
    r.raise_for_status()
    return dict(r.json())


def _pid(job: dict[str, Any]) -> int:
    pids = [m.group(1) for e in job["events"] if (m := re.search(r"\(pid (\d+)\)", e["reason"]))]
    assert pids, job["events"]
    return int(pids[-1])


def test_a_wall_clock_step_restarts_no_job_and_hides_no_dead_node(tmp_path: Path) -> None:
    server_clock = WallClock(tmp_path / "server-clock")
    agent_clock = WallClock(tmp_path / "agent-clock")
    srv = ServerProc(tmp_path / "data", extra_args=TIMING, env=server_clock.env())
    with srv:
        agent, agent_log = srv.start_agent(
            tmp_path, NODE, FAKE, "--poll", "0.1", env=agent_clock.env()
        )
        admin = httpx.Client(base_url=srv.url, headers=srv.headers())
        user = srv.tenant_client("team")
        try:
            node = lambda: admin.get(f"/v1/nodes/{NODE}").json()  # noqa: E731
            until(lambda: admin.get(f"/v1/nodes/{NODE}").is_success, "the agent's node", 60)
            job_id = user.post("/v1/jobs", json={"command": SLEEP, "spec": "A100"}).json()["id"]
            until(
                lambda: _job(user, job_id)["state"] == "running",
                f"job running (agent log: {agent_log.read_text()[-2000:]})",
                60,
            )
            pid = _pid(_job(user, job_id))

            # one hour ahead, on both sides, between two heartbeats: the agent is held (SIGSTOP)
            # for 2.5 s, inside its lease (6.4 s) and --lost-after (8 s), so that the server's
            # lost-node watch (every 0.25 s) sees the step (within 1 s) before the next one
            agent.send_signal(signal.SIGSTOP)
            try:
                server_clock.step(3600)
                agent_clock.step(3600)
                time.sleep(2.5)
            finally:
                agent.send_signal(signal.SIGCONT)
            time.sleep(3.0)  # heartbeats go on, past the step
            job = _job(user, job_id)
            assert node()["status"] == "ready", node()
            assert job["state"] == "running", job["events"]
            assert (job["attempts"], job["retries"]) == (1, 0), job
            assert not any("lost" in e["reason"] for e in job["events"]), job["events"]
            assert _pid(job) == pid and _alive(pid)  # the same run, never stopped

            # two hours back, and the agent is gone: the node is lost after --lost-after and its
            # job requeued once the lease is surely over, not an hour later
            server_clock.step(-7200)
            stop_process(agent)  # a graceful stop: the replica runs on until its lease ends
            until(lambda: node()["status"] == "lost", "the silent node marked lost", 60)
            until(lambda: _job(user, job_id)["state"] == "pending", "the job requeued", 60)
            assert not _alive(pid)  # its supervisor stopped it at the lease's end
        finally:
            stop_process(agent)
            admin.close()
            user.close()
    assert "Traceback" not in srv.log(), srv.log()
