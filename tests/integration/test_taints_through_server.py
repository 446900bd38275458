"""Taints through a real ``xpupool up`` and a real ``xpupool agent`` on 127.0.0.1 (issue 42,
part 3): a cluster-file node tainted NoSchedule keeps off the jobs that do not tolerate it, in
both request forms, and their reason names the taint; an agent registers with ``--taint``; the
admin takes a taint off with ``xpupool node taint`` (kubectl's syntax) and the waiting job
starts there; ``xpupool nodes`` and ``GET /v1/nodes`` show the taints; the change is audited and
outlives a restart with the same cluster file; a CPU-only job takes the CPU-only node."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner, Result
from server_proc import ServerProc, stop_process, until

from xpupool.cli import main

FAKE = Path(__file__).parents[1] / "fixtures" / "agent" / "fake-a100x2.yaml"
CLUSTER = """
nodes:
  - name: gpu-0
    cpu: 64
    memory: 256Gi
    taints: [gpu=true:NoSchedule]
    devices:
      - {vendor: nvidia, model: NVIDIA A100-SXM4-80GB, count: 4, memory: 80Gi, driver: 550.54.15}
  - name: cpu-0
    cpu: 32
    memory: 128Gi
"""
GPU_TAINT = {"key": "gpu", "value": "true", "effect": "NoSchedule"}


class Pool:
    def __init__(self, srv: ServerProc, home: Path) -> None:
        self.srv = srv
        self.home = home
        self.admin = httpx.Client(base_url=srv.url, headers=srv.headers(), timeout=60)
        self.user = srv.tenant_client("lab")

    def cli(self, *args: str) -> Result:
        env = {
            "XPUPOOL_URL": self.srv.url,
            "XPUPOOL_TOKEN": self.srv.admin_token,
            "HOME": str(self.home),
            "XPUPOOL_CONFIG": None,
            "COLUMNS": "200",
        }
        return CliRunner().invoke(main, list(args), env=env)  # type: ignore[arg-type]

    def submit(self, request: object) -> int:
        r = self.user.post("/v1/jobs", json={"command": ["true"], "request": request})
        assert r.status_code == 201, r.text
        return int(r.json()["id"])

    def job(self, job_id: int) -> dict[str, Any]:
        return dict(self.user.get(f"/v1/jobs/{job_id}").json())

    def placed_on(self, job_id: int) -> str:
        found = until(lambda: self.job(job_id)["assignments"], f"job {job_id} placed")
        return str(found[0]["node"])

    def taints(self) -> dict[str, list[dict[str, str]]]:
        return {n["name"]: n["taints"] for n in self.admin.get("/v1/nodes").json()}

    def close(self) -> None:
        self.admin.close()
        self.user.close()


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pool]:
    root: Path = tmp_path_factory.mktemp("taints")
    cluster = root / "cluster.yaml"
    cluster.write_text(CLUSTER)
    srv = ServerProc(root / "data", cluster=cluster, extra_args=("--heartbeat", "0.3"))
    srv.start()
    home = root / "home"
    home.mkdir()
    p = Pool(srv, home)
    try:
        yield p
    finally:
        p.close()
        srv.stop()


def test_taints_keep_work_off_until_the_admin_takes_them_off(pool: Pool, tmp_path: Path) -> None:
    assert pool.taints() == {"gpu-0": [GPU_TAINT], "cpu-0": []}
    assert pool.placed_on(pool.submit("cpu=1")) == "cpu-0"  # not the A100 node's spare cores
    tolerating = pool.submit("A100 mem=1Gi tolerate=gpu=true:NoSchedule")
    as_json = pool.submit(
        {"devices": {"memory": "1Gi"}, "tolerations": [{"key": "gpu", "operator": "Exists"}]}
    )
    waiting = pool.submit("A100 mem=1Gi")
    assert pool.placed_on(tolerating) == "gpu-0" and pool.placed_on(as_json) == "gpu-0"
    reason = until(lambda: pool.job(waiting)["reason"], "a pending reason")
    assert (
        "untolerated taint gpu=true:NoSchedule" in reason and not pool.job(waiting)["assignments"]
    )

    refused = pool.cli("node", "taint", "gpu-0", "gpu:NoExecute")
    assert refused.exit_code == 2 and "never evicts" in refused.output, refused.output
    done = pool.cli("node", "taint", "gpu-0", "gpu:NoSchedule-", "spot:PreferNoSchedule")
    assert done.exit_code == 0 and "spot:PreferNoSchedule" in done.output, done.output
    assert pool.placed_on(waiting) == "gpu-0"  # the taint went: it starts
    listed = pool.cli("nodes", "-o", "json")
    assert {n["name"]: n["taints"] for n in json.loads(listed.output)}["gpu-0"] == [
        {"key": "spot", "value": "", "effect": "PreferNoSchedule"}
    ]
    audit = json.loads(pool.cli("audit", "-o", "json").output)
    assert any(
        e["action"] == "taint_node"
        and e["target"] == "node gpu-0: spot:PreferNoSchedule gpu:NoSchedule-"
        for e in audit
    ), audit

    # an agent registers with --taint
    agent, log = pool.srv.start_agent(tmp_path, "etl-0", FAKE, "--taint", "team=etl:NoSchedule")
    try:
        until(lambda: "etl-0" in pool.taints(), "etl-0 registered", timeout_s=60)
        assert pool.taints()["etl-0"] == [{"key": "team", "value": "etl", "effect": "NoSchedule"}]
    finally:
        stop_process(agent)

    # a restart with the same cluster file keeps the admin's change
    pool.srv.stop()
    pool.srv.start(same_port=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and "gpu-0" not in pool.taints():
        time.sleep(0.1)
    assert pool.taints()["gpu-0"] == [{"key": "spot", "value": "", "effect": "PreferNoSchedule"}]
    assert pool.taints()["etl-0"][0]["key"] == "team", log.read_text()
