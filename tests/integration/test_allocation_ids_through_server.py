"""Allocation ids never repeat for a pool, through a real ``xpupool up`` and a real ``xpupool agent``
(issue 43, item 3). Reproduced before the fix, every time: job 1 got allocation ('box', 1) and
finished; a node registered (or the server restarted) and the rebuilt engine numbered from 1
again; job 2 got ('box', 1), the agent skipped an allocation it had finished, and job 2 sat
``scheduled`` for ever holding its card.

One server and one agent serve both tests in order (a registration, then a restart), because
starting them costs seconds on a shared machine. Every wait is bounded; nothing asserts a time.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from job_commands import JOB_PYTHON
from server_proc import ServerProc, stop_process, until

FAKE = Path(__file__).parents[1] / "fixtures" / "agent" / "fake-a100x2.yaml"
CLI = [sys.executable, "-c", "from xpupool.cli import main; main()"]
NODE = "box"
QUICK = [JOB_PYTHON, "-c", "print('ran', flush=True)"]


@dataclass
class Pool:
    srv: ServerProc
    user_token: str
    agent: subprocess.Popen[bytes]
    agent_log: Path
    work_dir: Path

    def user(self) -> httpx.Client:
        return httpx.Client(base_url=self.srv.url, headers=self.srv.headers(self.user_token))

    def admin(self) -> httpx.Client:
        return httpx.Client(base_url=self.srv.url, headers=self.srv.headers())

    def run_to_the_end(self, what: str) -> dict[str, Any]:
        """Submit a one-card A100 job (only ``box`` has A100s) and wait until it succeeds; a job
        that never starts fails the test naming ``what`` and the job's last reason."""
        with self.user() as user:
            r = user.post("/v1/jobs", json={"command": QUICK, "spec": "A100:1"})
            assert r.status_code == 201, r.text
            job_id = int(r.json()["id"])
            last: dict[str, Any] = {}

            def done() -> bool:
                last.update(user.get(f"/v1/jobs/{job_id}").json())
                return last["state"] in ("succeeded", "failed", "cancelled", "lost")

            try:
                until(done, f"{what}: job {job_id} to end", 30)
            except AssertionError:
                raise AssertionError(
                    f"{what}: job {job_id} is {last.get('state')} ({last.get('reason')}); "
                    f"agent log: {self.agent_says()}"
                ) from None
            assert last["state"] == "succeeded", last
            return last

    def agent_says(self) -> str:
        """The agent's log without its HTTP request lines: what it decided."""
        lines = self.agent_log.read_text(errors="replace").splitlines()
        return "\n".join(line for line in lines if "HTTP Request" not in line)[-1500:]

    def allocations_run(self) -> dict[int, int]:
        """Each finished job's allocation id, from the logs the agent keeps of each run
        (``NODE/logs/JOB-REPLICA-ALLOCATION-ATTEMPT.log`` under its work dir). A log moves
        there only once the server acknowledged the run's end, a heartbeat after the job
        shows ``succeeded``: wait for a given job's, never for a count."""
        logs = self.work_dir / NODE / "logs"
        return {int(p.name.split("-")[0]): int(p.name.split("-")[2]) for p in logs.glob("*.log")}

    def allocation_of(self, job: dict[str, Any]) -> dict[int, int]:
        """Wait until the agent kept job ``job``'s log; every job's allocation id so far."""
        job_id = int(job["id"])
        return until(
            lambda: job_id in (ids := self.allocations_run()) and ids, f"job {job_id}'s log"
        )


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pool]:
    data = tmp_path_factory.mktemp("alloc-ids")
    srv = ServerProc(data / "up", extra_args=("--heartbeat", "0.2", "--lost-after", "3"))
    agent: subprocess.Popen[bytes] | None = None
    with srv:
        with httpx.Client(base_url=srv.url, headers=srv.headers()) as admin:
            admin.post("/v1/tenants", json={"name": "team"}).raise_for_status()
            tokens = {
                role: admin.post("/v1/tenants/team/tokens", json={"role": role}).json()["token"]
                for role in ("tenant", "agent")
            }
        work_dir = data / "agent"
        agent_log = data / "agent.log"
        how = ("--fake", str(FAKE), "--grace", "1", "--poll", "0.05", "--work-dir", str(work_dir))
        agent = subprocess.Popen(
            [*CLI, "agent", "--server", srv.url, "--node", NODE, *how],
            stdout=agent_log.open("wb"),
            stderr=subprocess.STDOUT,
            env={**os.environ, "XPUPOOL_TOKEN": tokens["agent"]},
        )
        try:
            with httpx.Client(base_url=srv.url, headers=srv.headers()) as admin:
                until(lambda: admin.get(f"/v1/nodes/{NODE}").status_code == 200, "registration")
            yield Pool(srv, tokens["tenant"], agent, agent_log, work_dir)
        finally:
            stop_process(agent)


def _register_other_node(pool: Pool) -> None:
    """An Ascend node registers (the admin, as an operator would): the engine is rebuilt. Its
    cards are no A100s, so the next A100 job still goes to ``box``."""
    body = {
        "name": "npu-1",
        "cpu_milli": 64_000,
        "memory_mib": 1 << 19,
        "devices": [
            {
                "uuid": "npu-1-0",
                "vendor": "huawei",
                "model": "Ascend 910B",
                "memory_mib": 65536,
                "index": 0,
                "driver_version": "24.1.0",
                "runtimes": {"cann": "8.0"},
            }
        ],
    }
    with pool.admin() as admin:
        r = admin.post("/v1/agent/register", json=body)
        assert r.status_code == 200, r.text


def test_a_registration_does_not_reuse_a_finished_allocations_id(pool: Pool) -> None:
    pool.allocation_of(pool.run_to_the_end("before the registration"))
    _register_other_node(pool)
    ran = pool.allocation_of(pool.run_to_the_end("after a node registered"))
    assert len(ran) == 2 and len(set(ran.values())) == 2, ran


def test_a_restart_does_not_reuse_a_finished_allocations_id(pool: Pool) -> None:
    before = pool.allocation_of(pool.run_to_the_end("before the restart"))
    pool.srv.stop()
    pool.srv.start(same_port=True)  # the external agent keeps running and finds it again
    ran = pool.allocation_of(pool.run_to_the_end("after the server restarted"))
    assert len(ran) == len(before) + 1 and len(set(ran.values())) == len(ran), ran
