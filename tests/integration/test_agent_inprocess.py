"""The agent inside ``xpupool up``: the local host registers itself (CPU-only here, so with the
devices its probes find, none on this machine) and the cluster file's simulated nodes run their
replicas as local processes with the simulated devices in the vendor variables."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from job_commands import JOB_PYTHON
from server_proc import stop_process, until
from test_agent_e2e import CLI, ENV_SCRIPT, SLEEP, Pool, _alive, _free_port

FAST = ("--heartbeat", "0.2", "--lost-after", "1.5")
CLUSTER = Path(__file__).parents[1] / "fixtures" / "agent" / "cluster-sim.yaml"


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Pool, subprocess.Popen[bytes]]]:
    data = tmp_path_factory.mktemp("up-agent")
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    log_path = data / "server.log"
    server = subprocess.Popen(
        [
            *CLI,
            "up",
            "--data",
            str(data),
            "--port",
            str(port),
            "--cluster",
            str(CLUSTER),
            "--heartbeat",
            "0.2",
            "--lost-after",
            "1.5",
        ],
        stdout=log_path.open("wb"),
        stderr=subprocess.STDOUT,
    )
    clients: list[httpx.Client] = []
    try:

        def healthy() -> bool:
            if server.poll() is not None:
                pytest.fail(f"server exited: {log_path.read_text()[-2000:]}")
            try:
                return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        until(healthy, "the server", 30)
        token = (data / "admin-token").read_text().strip()
        admin = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"})
        clients.append(admin)
        admin.post("/v1/tenants", json={"name": "team"}).raise_for_status()
        r = admin.post("/v1/tenants/team/tokens", json={"role": "tenant"})
        r.raise_for_status()
        user = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {r.json()['token']}"})
        clients.append(user)
        yield Pool(url, admin, user, server, log_path), server
    finally:
        for c in clients:
            c.close()
        stop_process(server)


def test_local_host_registers_itself(up: tuple[Pool, subprocess.Popen[bytes]]) -> None:
    pool, _ = up
    nodes = until(
        lambda: [n for n in pool.admin.get("/v1/nodes").json() if n["source"] == "agent"],
        "the local host",
    )
    assert len(nodes) == 1
    assert nodes[0]["labels"] == {"xpupool/local": "true", "xpupool/address": "127.0.0.1"}
    assert nodes[0]["status"] == "ready" and nodes[0]["cpu_milli"] > 0
    sims = {n["name"] for n in pool.admin.get("/v1/nodes").json() if n["source"] == "cluster"}
    assert sims == {"sim-a100", "sim-910b"}


def test_simulated_ascend_node_runs_a_real_process(
    up: tuple[Pool, subprocess.Popen[bytes]],
) -> None:
    pool, _ = up
    script = ENV_SCRIPT.replace("('CUDA_', 'NVIDIA_', 'XPUPOOL_')", "('ASCEND', 'XPUPOOL_')")
    job_id = pool.submit([JOB_PYTHON, "-c", script], "910B:2")
    pool.wait_state(job_id, "succeeded")
    logs = until(
        lambda: "done" in (t := pool.user.get(f"/v1/jobs/{job_id}/logs").text) and t, "log"
    )
    env = dict(line.split("=", 1) for line in logs.splitlines() if "=" in line)
    indices = env["XPUPOOL_DEVICE_INDICES"]
    assert len(indices.split(",")) == 2
    assert env["ASCEND_RT_VISIBLE_DEVICES"] == indices
    assert env["XPUPOOL_NODE"] == "sim-910b"
    assert env["XPUPOOL_DEVICE_UUIDS"].startswith("sim-910b-")


def test_replicas_of_a_job_get_the_distributed_training_variables(
    up: tuple[Pool, subprocess.Popen[bytes]],
) -> None:
    pool, _ = up
    names = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "XPUPOOL_PEERS")
    script = f"import os\nfor k in {names!r}:\n    print(k + '=' + os.environ[k])\nprint('done')"
    job_id = pool.submit([JOB_PYTHON, "-c", script], "A100 mem=1Gi replicas=2")
    pool.wait_state(job_id, "succeeded")
    seen = []
    for replica in range(2):
        text = until(
            lambda r=replica: (
                "done"
                in (t := pool.user.get(f"/v1/jobs/{job_id}/logs", params={"replica": r}).text)
                and t
            ),
            f"replica {replica}'s log",
        )
        seen.append(dict(line.split("=", 1) for line in text.splitlines() if "=" in line))
    assert [e["RANK"] for e in seen] == ["0", "1"]
    assert [e["LOCAL_RANK"] for e in seen] == ["0", "1"]  # both on sim-a100
    for env in seen:
        assert env["WORLD_SIZE"] == "2"
        assert env["MASTER_ADDR"] == "127.0.0.1"  # the in-process agent runs sim-a100 here
        assert env["MASTER_PORT"] == str(29500 + job_id % 1000)
        assert env["XPUPOOL_PEERS"] == "127.0.0.1,127.0.0.1"


def test_cancel_on_a_simulated_node(up: tuple[Pool, subprocess.Popen[bytes]]) -> None:
    pool, _ = up
    job_id = pool.submit(SLEEP, "A100 mem=10Gi")
    pool.wait_state(job_id, "running")
    pid = pool.pid(job_id)
    assert _alive(pid)
    assert pool.user.post(f"/v1/jobs/{job_id}/cancel").status_code == 200
    pool.wait_state(job_id, "cancelled", 30)  # default grace 10 s; python exits on SIGTERM
    assert not _alive(pid)


def test_server_stop_leaves_the_replicas_to_their_lease(
    up: tuple[Pool, subprocess.Popen[bytes]],
) -> None:
    pool, server = up
    job_id = pool.submit(SLEEP, "A100")
    pool.wait_state(job_id, "running")
    pid = pool.pid(job_id)
    stop_process(server)
    assert _alive(pid)  # a graceful stop leaves running work running, under its supervisor
    until(lambda: not _alive(pid), "the replica stopped at its lease's end", 20)
