"""An image job's life on a real podman under a standalone ``xpupool agent`` (issue 45, part 1):
stop with grace (SIGTERM through the runtime, SIGKILL after ``--grace``), the agent restarting and
taking its running container back, and a dead agent's containers removed at its next start, by
its own ``xpupool.owner`` label only: another pool's container, same node name and job number,
survives. Podman runs with the product's defaults (the agent's detected runtime configuration);
the image is the shared busybox one (tests/container_images.py). A missing engine fails.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from server_proc import ServerProc, stop_process, until
from test_agent_e2e import FAKE

from container_images import busybox_image, containers, podman, require_podman

__all__ = ["busybox_image"]  # a fixture, used by name

NODE = "box"
GRACE_S = 2.0
TICKS = "echo up; i=0; while true; do i=$((i+1)); echo tick-$i; sleep 0.3; done"


@dataclass
class Pool:
    srv: ServerProc
    user: httpx.Client
    tmp: Path
    token_file: Path
    image: str
    agent: subprocess.Popen[bytes] | None = None

    @property
    def work_dir(self) -> Path:
        return self.tmp / "agent"

    @property
    def owner(self) -> str:
        return str(self.work_dir / NODE)

    def start_agent(self) -> None:
        """``xpupool agent --runtime podman`` on this pool's work dir (the same on a restart)."""
        assert self.agent is None or self.agent.poll() is not None
        argv = [sys.executable, "-c", "from xpupool.cli import main; main()", "agent"]
        argv += ["--server", self.srv.url, "--token-file", str(self.token_file), "--node", NODE]
        argv += ["--fake", str(FAKE), "--work-dir", str(self.work_dir), "--runtime", "podman"]
        argv += ["--grace", str(GRACE_S)]
        env = {k: v for k, v in os.environ.items() if k != "CONTAINERS_CONF"}
        with (self.tmp / "agent.log").open("ab") as out:
            self.agent = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)

    def agent_log(self) -> str:
        return (self.tmp / "agent.log").read_text()[-4000:]

    def kill_agent(self) -> None:
        """SIGKILL: the agent has no chance to do anything on its way out."""
        assert self.agent is not None
        self.agent.kill()
        self.agent.wait(10)

    def submit(self, script: str) -> int:
        body = {"image": self.image, "command": ["sh", "-c", script], "spec": "cpu=100m"}
        r = self.user.post("/v1/jobs", json=body)
        assert r.status_code == 201, r.text
        return int(r.json()["id"])

    def job(self, job_id: int) -> dict[str, Any]:
        return dict(self.user.get(f"/v1/jobs/{job_id}").json())

    def wait(self, job_id: int, *states: str, timeout_s: float = 60) -> dict[str, Any]:
        return dict(
            until(
                lambda: (j := self.job(job_id))["state"] in states and j,
                f"job {job_id} {states} (agent: {self.agent_log()})",
                timeout_s,
            )
        )

    def logs(self, job_id: int) -> str:
        return self.user.get(f"/v1/jobs/{job_id}/logs").text

    def mine(self, job_id: int) -> list[str]:
        """This pool's containers of ``job_id``, by the labels the agent gives them."""
        return [
            name
            for name in containers(f"xpupool.owner={self.owner}")
            if name in containers(f"xpupool.job={job_id}")
        ]


@pytest.fixture
def pool(tmp_path: Path, busybox_image: str) -> Iterator[Pool]:
    require_podman()
    with ServerProc(tmp_path / "data", extra_args=("--heartbeat", "0.2")) as srv:
        token_file = srv.agent_token_file(tmp_path / "agent-token", f"{NODE}-ops")
        user = srv.tenant_client("team")
        p = Pool(srv, user, tmp_path, token_file, busybox_image)
        p.start_agent()
        try:
            until(
                lambda: user.get("/v1/nodes").json() and True,
                f"the agent to register ({p.agent_log()})",
                60,
            )
            yield p
        finally:
            if p.agent is not None:
                stop_process(p.agent)
            for name in containers(f"xpupool.owner={p.owner}"):
                podman("rm", "-f", name)
            user.close()


def _ticks(text: str) -> int:
    return max((int(w.split("-")[1]) for w in text.split() if w.startswith("tick-")), default=0)


def test_stop_sends_sigterm_then_kills_after_the_grace_period(pool: Pool) -> None:
    script = "trap 'echo got TERM' TERM; echo up; while true; do sleep 0.2; done"
    job_id = pool.submit(script)
    pool.wait(job_id, "running")
    until(lambda: "up" in pool.logs(job_id), "the job's first line", 120)
    assert len(pool.mine(job_id)) == 1
    asked = time.monotonic()
    assert pool.user.post(f"/v1/jobs/{job_id}/cancel").status_code == 200
    job = pool.wait(job_id, "cancelled")
    took = time.monotonic() - asked
    assert "got TERM" in pool.logs(job_id)  # SIGTERM reached the job through the runtime
    assert took >= GRACE_S, job  # it ignored it: killed once the grace period was over
    until(lambda: not pool.mine(job_id), "its container to be removed")


def test_a_job_that_exits_on_sigterm_stops_within_the_grace_period(pool: Pool) -> None:
    job_id = pool.submit("trap 'echo bye; exit 0' TERM; echo up; while true; do sleep 0.2; done")
    pool.wait(job_id, "running")
    until(lambda: "up" in pool.logs(job_id), "the job's first line", 120)
    assert pool.user.post(f"/v1/jobs/{job_id}/cancel").status_code == 200
    pool.wait(job_id, "cancelled")
    assert "bye" in pool.logs(job_id)
    until(lambda: not pool.mine(job_id), "its container to be removed")


def test_a_restarted_agent_takes_its_running_container_back(pool: Pool) -> None:
    job_id = pool.submit(TICKS)
    pool.wait(job_id, "running")
    until(lambda: _ticks(pool.logs(job_id)) >= 2, "the job's ticks")
    before = pool.mine(job_id)
    assert len(before) == 1
    pool.kill_agent()
    time.sleep(1.0)
    assert pool.mine(job_id) == before  # the container runs on without its agent
    pool.start_agent()
    until(lambda: "re-attached" in pool.agent_log(), f"re-attachment ({pool.agent_log()})")
    seen = _ticks(pool.logs(job_id))
    until(lambda: _ticks(pool.logs(job_id)) > seen + 2, "its output after the restart")
    assert pool.job(job_id)["state"] == "running"
    assert pool.mine(job_id) == before  # the same container, not a new one
    assert pool.user.post(f"/v1/jobs/{job_id}/cancel").status_code == 200
    pool.wait(job_id, "cancelled")
    until(lambda: not pool.mine(job_id), "its container to be removed")


def _supervisor_pid(pool: Pool, job_id: int) -> int:
    [status] = (pool.work_dir / NODE / "replicas").glob(f"{job_id}.0.*/status.json")
    return int(json.loads(status.read_text())["supervisor_pid"])


def test_a_dead_agents_containers_are_removed_at_its_next_start_and_no_one_elses(
    pool: Pool,
) -> None:
    job_id = pool.submit(TICKS)
    pool.wait(job_id, "running")
    until(lambda: "up" in pool.logs(job_id), "the job's first line", 120)
    [left] = pool.mine(job_id)
    # another pool's agent on this host: the same node name and job number, its own work dir
    other = f"xpupool-{NODE}-{job_id}-0-1-otherpool"
    labels = [f"xpupool.node={NODE}", f"xpupool.job={job_id}", "xpupool.owner=/srv/other/box"]
    started = podman(
        "run", "-d", "--rm", "--name", other,
        *(a for label in labels for a in ("--label", label)),
        pool.image, "sleep", "300",
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    try:
        pool.kill_agent()
        os.kill(_supervisor_pid(pool, job_id), signal.SIGKILL)  # and the client with it
        time.sleep(1.0)
        assert pool.mine(job_id) == [left]  # the container did not die with them
        pool.start_agent()
        until(lambda: not pool.mine(job_id), f"the leftover to be removed ({pool.agent_log()})")
        said = f"container {left}: left by a run no supervisor holds; removed"
        until(lambda: said in pool.agent_log(), f"the agent to say so ({pool.agent_log()})")
        assert containers(f"xpupool.job={job_id}") == [other]  # another pool's: untouched
        running = podman("inspect", "--format", "{{.State.Running}}", other)
        assert running.stdout.strip() == "true", running.stderr
    finally:
        podman("rm", "-f", other)
