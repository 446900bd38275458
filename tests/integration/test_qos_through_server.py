"""QoS classes through a real ``xpupool up`` on 127.0.0.1 (issue 54 part 5). A cluster-file node
whose one A100 may grant twice its memory (``overcommit: {memory: 2.0}``) runs three best-effort
halves, 1.5 physical cards, as real processes; a guaranteed half then cannot ride on the
over-committed part, so the plane preempts two best-effort jobs (the lowest priority; 1.5 cards
granted leave no physical room until two halves go) and the guaranteed job runs once their
processes are gone; ``xpupool job`` shows the class."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner
from server_proc import ServerProc, until

from xpupool.cli import main

CLUSTER = """
nodes:
  - name: oc-0
    cpu: 16
    memory: 64Gi
    overcommit: {memory: 2.0}
    devices:
      - {vendor: nvidia, model: NVIDIA A100-SXM4-80GB, count: 1, memory: 80Gi, driver: 550.54.15}
"""

pytestmark = pytest.mark.slow


@pytest.fixture
def srv(tmp_path: Path) -> Iterator[ServerProc]:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(CLUSTER)
    proc = ServerProc(
        tmp_path / "data", cluster=cluster, agent=True, extra_args=("--heartbeat", "0.3")
    )
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


def _submit(user: httpx.Client, spec: str) -> int:
    r = user.post("/v1/jobs", json={"spec": spec, "command": ["sleep", "600"]})
    assert r.status_code == 201, r.text
    return int(r.json()["id"])


def _job(user: httpx.Client, job_id: int) -> dict[str, Any]:
    return dict(user.get(f"/v1/jobs/{job_id}").json())


def test_a_guaranteed_share_preempts_best_effort_off_the_physical_part(
    srv: ServerProc, tmp_path: Path
) -> None:
    with srv.tenant_client("lab") as user:
        riders = [_submit(user, "A100 mem=50% qos=best-effort") for _ in range(3)]
        for i in riders:
            until(lambda i=i: _job(user, i)["state"] == "running", f"rider {i} running")
        guaranteed = _submit(user, "A100 mem=50% qos=guaranteed")
        until(
            lambda: _job(user, guaranteed)["state"] == "running",
            "the guaranteed job running",
            timeout_s=90,
        )
        preempted = [
            i for i in riders if any("preempted" in e["reason"] for e in _job(user, i)["events"])
        ]
        # 1.5 cards were granted: a half of physical room means two halves go, no more
        assert len(preempted) == 2, [_job(user, i)["events"] for i in riders]
        shown = _job(user, guaranteed)
        assert (shown["qos"], shown["assignments"][0]["node"]) == ("guaranteed", "oc-0")
        env = {
            "XPUPOOL_URL": srv.url,
            "XPUPOOL_TOKEN": srv.admin_token,
            "HOME": str(tmp_path),
            "COLUMNS": "200",
            "XPUPOOL_CONFIG": None,
        }
        out = CliRunner().invoke(main, ["job", str(guaranteed)], env=env)  # type: ignore[arg-type]
        assert out.exit_code == 0, out.output
        assert any(line.split()[:2] == ["qos", "guaranteed"] for line in out.output.splitlines()), (
            out.output
        )
