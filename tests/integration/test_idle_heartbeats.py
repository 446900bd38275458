"""Simulated nodes that run nothing cost one heartbeat per period for all of them, not one each
(issue 25): a real ``xpupool up`` with its in-process agent and a cluster file of 40 simulated
nodes, read through ``/metrics``. Every node is seen each period (its last-heartbeat time moves)
while no node heartbeats on its own; a job placed on one still reaches it and runs, and the node
goes back to the shared heartbeat once its replica has ended."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families
from server_proc import ServerProc, until

NODES = 40
CLUSTER = f"""nodes:
  - name: idle
    count: {NODES}
    cpu: 16
    memory: 64Gi
    devices:
      - {{vendor: nvidia, model: NVIDIA A100-SXM4-80GB, count: 2, memory: 80Gi,
          driver: 550.54.15}}
"""


def scrape(admin: httpx.Client) -> tuple[dict[str, float], dict[str, float]]:
    """(last heartbeat time, heartbeats counted) per simulated node."""
    seen: dict[str, float] = {}
    beats: dict[str, float] = {}
    for family in text_string_to_metric_families(admin.get("/metrics").text):
        for sample in family.samples:
            node = sample.labels.get("node", "")
            if not node.startswith("idle-"):
                continue
            if sample.name == "xpupool_node_last_heartbeat_timestamp_seconds":
                seen[node] = sample.value
            elif sample.name == "xpupool_agent_heartbeats_total":
                beats[node] = sample.value
    return seen, beats


def test_idle_simulated_nodes_heartbeat_together(tmp_path: Path) -> None:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(CLUSTER)
    fast = ("--heartbeat", "0.2", "--lost-after", "1.5")
    srv = ServerProc(tmp_path / "data", cluster=cluster, agent=True, extra_args=fast)
    with srv, httpx.Client(base_url=srv.url, headers=srv.headers(), timeout=30) as admin:
        first, _ = until(
            lambda: (got := scrape(admin))[0].keys() >= {f"idle-{i}" for i in range(NODES)} and got,
            "every simulated node seen",
        )
        time.sleep(1.5)  # about seven heartbeat periods
        later, beats = scrape(admin)
        assert all(later[n] > first[n] for n in first), "every node is seen each period"
        assert sum(beats.values()) == 0, f"idle nodes heartbeat on their own: {beats}"

        admin.post("/v1/tenants", json={"name": "team"}).raise_for_status()
        r = admin.post("/v1/jobs", json={"tenant": "team", "command": ["true"], "spec": "A100:1"})
        assert r.status_code == 201, r.text
        job_id = r.json()["id"]
        job = until(
            lambda: (j := admin.get(f"/v1/jobs/{job_id}").json())["state"] == "succeeded" and j,
            "the job to run on a simulated node and succeed",
        )
        node = next(e["reason"] for e in job["events"] if e["state"] == "scheduled")
        node = node.removeprefix("on ")
        _, during = scrape(admin)
        assert during.get(node, 0) >= 1, "the node with work heartbeat on its own"
        time.sleep(1.0)  # its replica ended and was reported: idle again
        _, after = scrape(admin)
        time.sleep(1.0)
        _, again = scrape(admin)
        assert again == after, "a node whose replica ended heartbeats with the others again"
