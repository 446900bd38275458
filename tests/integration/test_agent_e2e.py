"""The node agent end to end: a real ``xpupool up`` and a real ``xpupool agent`` on 127.0.0.1.

Both run as subprocesses, as an operator would start them; the agent reads two fake A100 cards
from a YAML file. One module-scoped server and agent serve the tests in order (register, run,
cancel, then kill the agent), because starting a server costs seconds on a shared machine.
Heartbeats every 0.2 s and a 1.5 s lost-after keep every wait short; every wait is bounded.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from job_commands import JOB_PYTHON
from server_proc import stop_process, until

FAKE = Path(__file__).parents[1] / "fixtures" / "agent" / "fake-a100x2.yaml"
CLI = [sys.executable, "-c", "from xpupool.cli import main; main()"]
NODE = "gpu-box"

ENV_SCRIPT = (
    "import os\n"
    "for k in sorted(os.environ):\n"
    "    if k.startswith(('CUDA_', 'NVIDIA_', 'XPUPOOL_')):\n"
    "        print(f'{k}={os.environ[k]}')\n"
    "print('done', flush=True)\n"
)
SLEEP = [JOB_PYTHON, "-c", "import time; print('sleeping', flush=True); time.sleep(60)"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] not in "ZX"


@dataclass
class Pool:
    url: str
    admin: httpx.Client
    user: httpx.Client
    agent: subprocess.Popen[bytes]
    agent_log: Path

    def job(self, job_id: int) -> dict[str, Any]:
        response = self.user.get(f"/v1/jobs/{job_id}")
        response.raise_for_status()
        return dict(response.json())

    def wait_state(self, job_id: int, state: str, timeout_s: float = 20.0) -> dict[str, Any]:
        return dict(
            until(
                lambda: (j := self.job(job_id))["state"] == state and j,
                f"job {job_id} {state} (agent log: {self.agent_log.read_text()[-2000:]})",
                timeout_s,
            )
        )

    def submit(self, command: list[str], spec: str) -> int:
        response = self.user.post("/v1/jobs", json={"command": command, "spec": spec})
        assert response.status_code == 201, response.text
        return int(response.json()["id"])

    def pid(self, job_id: int) -> int:
        for event in self.job(job_id)["events"]:
            found = re.search(r"\(pid (\d+)\)", event["reason"])
            if found:
                return int(found.group(1))
        raise AssertionError("no pid in the job's events")


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pool]:
    data = tmp_path_factory.mktemp("up")
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    server_log = (data / "server.log").open("wb")
    server = subprocess.Popen(
        [
            *CLI,
            "up",
            "--no-agent",
            "--data",
            str(data),
            "--port",
            str(port),
            "--heartbeat",
            "0.2",
            "--lost-after",
            "1.5",
        ],
        stdout=server_log,
        stderr=subprocess.STDOUT,
    )
    clients: list[httpx.Client] = []
    agent: subprocess.Popen[bytes] | None = None
    try:

        def healthy() -> bool:
            try:
                return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
            except httpx.HTTPError:
                return server.poll() is not None and pytest.fail("server exited")

        until(healthy, "the server", 30)
        admin_token = (data / "admin-token").read_text().strip()
        admin = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {admin_token}"})
        clients.append(admin)
        admin.post("/v1/tenants", json={"name": "team"}).raise_for_status()
        tokens = {}
        for role in ("tenant", "agent"):
            r = admin.post("/v1/tenants/team/tokens", json={"role": role})
            r.raise_for_status()
            tokens[role] = r.json()["token"]
        user = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {tokens['tenant']}"})
        clients.append(user)
        agent_log = data / "agent.log"
        agent = subprocess.Popen(
            [
                *CLI,
                "agent",
                "--server",
                url,
                "--node",
                NODE,
                "--fake",
                str(FAKE),
                "--grace",
                "1",
                "--poll",
                "0.05",
                "--work-dir",
                str(data / "agent"),
            ],
            stdout=agent_log.open("wb"),
            stderr=subprocess.STDOUT,
            env={**os.environ, "XPUPOOL_TOKEN": tokens["agent"]},
        )
        yield Pool(url, admin, user, agent, agent_log)
    finally:
        if agent is not None:
            stop_process(agent)
        for c in clients:
            c.close()
        stop_process(server)
        server_log.close()


def test_registers_with_its_devices(pool: Pool) -> None:
    node = until(
        lambda: (r := pool.admin.get(f"/v1/nodes/{NODE}")).status_code == 200 and r.json(),
        "registration",
    )
    assert node["status"] == "ready"
    assert node["source"] == "agent"
    assert node["devices"] == 2
    assert node["labels"]["xpupool/address"] == "127.0.0.1"  # its address on the route to us
    assert node["cpu_milli"] > 0 and node["memory_mib"] > 0 and node["arch"]
    devices = pool.admin.get("/v1/devices").json()
    assert sorted(d["uuid"] for d in devices if d["node"] == NODE) == [
        "GPU-fake-a100-0",
        "GPU-fake-a100-1",
    ]
    first = node["last_heartbeat"]
    until(
        lambda: pool.admin.get(f"/v1/nodes/{NODE}").json()["last_heartbeat"] != first,
        "a heartbeat",
    )
    # metrics from heartbeats: a reading the fake probe has (memory used) is there, one it has
    # not (power) is absent, not zero
    metrics = until(
        lambda: (
            (t := pool.admin.get("/metrics").text)
            and "xpupool_device_memory_used_bytes{" in t
            and t
        ),
        "device metrics",
    )
    assert "xpupool_device_power_watts{" not in metrics
    assert f'xpupool_node_last_heartbeat_timestamp_seconds{{node="{NODE}"' in metrics


def test_runs_a_fractional_job_with_its_variables_and_log(pool: Pool) -> None:
    job_id = pool.submit([JOB_PYTHON, "-c", ENV_SCRIPT], "A100 mem=20Gi cores=30%")
    job = pool.wait_state(job_id, "succeeded")
    assert job["exit_code"] == 0
    logs = until(
        lambda: "done" in (t := pool.user.get(f"/v1/jobs/{job_id}/logs").text) and t, "log"
    )
    env = dict(line.split("=", 1) for line in logs.splitlines() if "=" in line)
    index = env["XPUPOOL_DEVICE_INDICES"]
    assert index in ("0", "1")
    assert env["CUDA_VISIBLE_DEVICES"] == index
    assert env["NVIDIA_VISIBLE_DEVICES"] == f"GPU-fake-a100-{index}"
    assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == "20480m"
    assert env["CUDA_DEVICE_SM_LIMIT"] == "30"
    assert env["XPUPOOL_JOB_ID"] == str(job_id)
    assert env["XPUPOOL_NODE"] == NODE
    assert env["XPUPOOL_DEVICE_MEMORY_MIB"] == "20480"
    assert env["XPUPOOL_DEVICE_CORES_PERMILLE"] == "300"
    assert "XPUPOOL_TOKEN" not in logs


def test_cancel_stops_the_process(pool: Pool) -> None:
    job_id = pool.submit(SLEEP, "A100")
    pool.wait_state(job_id, "running")
    pid = pool.pid(job_id)
    assert _alive(pid)
    assert pool.user.post(f"/v1/jobs/{job_id}/cancel").status_code == 200
    pool.wait_state(job_id, "cancelled")
    assert not _alive(pid)  # cancelled only once the process is gone
    free = pool.admin.get(f"/v1/nodes/{NODE}").json()["devices_free"]
    assert free == 2


def test_killed_agent_means_lost_node_and_requeued_job(pool: Pool) -> None:
    job_id = pool.submit(SLEEP, "A100")
    pool.wait_state(job_id, "running")
    pid = pool.pid(job_id)
    pool.agent.send_signal(signal.SIGKILL)
    pool.agent.wait(5)
    until(lambda: pool.admin.get(f"/v1/nodes/{NODE}").json()["status"] == "lost", "node lost", 10)
    job = pool.wait_state(job_id, "pending", 10)
    assert job["attempts"] == 1
    assert any(e["state"] == "pending" and "lost" in e["reason"] for e in job["events"])
    until(lambda: not _alive(pid), "the replica stopped by its supervisor at its lease's end", 5)
