"""What the fleet overview and one history sample cost at fleet scale (issue 23).

    python bench/overview.py                      # 1,000 and 5,000 nodes, one JSON line
    python bench/overview.py --nodes 50 --repeat 3

For each ``--nodes`` count: an in-process plane on a temporary SQLite file with bench/api.py's
generated pool (x 8 cards, six models of five vendors, two sites), about ``--jobs-per-node`` jobs
of bench/api.py's mix submitted and placed, a few that cannot fit left pending, and a reading
for every card as agents would report it. Then, in milliseconds (median of ``--repeat``):

- ``overview_cold_ms``: the first ``fleet_overview`` (card layout, shape table, stranded measure
  and the pending jobs' explanations all made);
- ``overview_ms``: again, nothing changed (what a dashboard polling an idle pool costs);
- ``overview_after_change_ms``: after one job is placed (the stranded measure is redone);
- ``history_sample_ms``: one ``FleetHistory.sample`` (the overview's sums under the lock, the
  rows written in their own transaction), and ``history_snapshot_ms`` the part under the lock.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from api import MIX, cluster_yaml
from xpupool.probes.cluster_file import load_cluster
from xpupool.server.auth import Principal
from xpupool.server.history import FleetHistory
from xpupool.server.plane import ControlPlane
from xpupool.server.scheduler_loop import schedule_pass
from xpupool.server.schemas.jobs import JobIn
from xpupool.server.schemas.tenants import TenantIn
from xpupool.server.services import fleet, jobs, overview, tenants
from xpupool.server.services.overview import snapshot

ADMIN = Principal(0, "admin", None)


def job_body(spec: str) -> JobIn:
    return JobIn.model_validate({"spec": spec, "command": ["true"]})


def build(nodes: int, jobs_per_node: float, data: Path, seed: int = 0) -> ControlPlane:
    """The plane with its pool, placed jobs, a few pending ones and a reading per card."""
    plane = ControlPlane(f"sqlite:///{data / 'state.db'}", data)
    cluster = data / "cluster.yaml"
    cluster.write_text(cluster_yaml(nodes))
    fleet.register_many(plane, load_cluster(cluster), source="cluster")
    rng = np.random.default_rng(seed)
    weights = np.asarray([w for w, _ in MIX], np.float64)
    specs = [spec for _, spec in MIX]
    names = [f"t{k}" for k in range(8)]  # tenants' pending limits: spread the jobs over several
    for name in names:
        tenants.create_tenant(plane, TenantIn(name=name))
    wanted = int(nodes * jobs_per_node)
    for k in range(wanted):
        who = Principal(0, "tenant", names[k % len(names)])
        spec = specs[int(rng.choice(len(specs), p=weights / weights.sum()))]
        jobs.submit(plane, who, job_body(spec))
        if k % 500 == 499:
            while schedule_pass(plane):
                pass
    for k in range(16):  # more whole H100 nodes than there are: some wait
        who = Principal(0, "tenant", names[k % len(names)])
        jobs.submit(plane, who, job_body("H100:8"))
    while schedule_pass(plane):
        pass
    now = plane.clock()
    for uuid in plane.read_columns(lambda state: list(state.uuid_slot)):
        plane.live.record(uuid, now, float(rng.uniform(0, 100)), 1000.0, 250.0, 55.0)
    return plane


def timed_ms(call: Any, repeat: int) -> float:
    out = []
    for _ in range(repeat):
        started = time.perf_counter()
        call()
        out.append((time.perf_counter() - started) * 1000)
    return round(statistics.median(out), 3)


def measure(nodes: int, jobs_per_node: float, repeat: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="xpupool-overview-") as tmp:
        plane = build(nodes, jobs_per_node, Path(tmp))
        started = time.perf_counter()
        seen = overview.fleet_overview(plane, ADMIN)
        cold = (time.perf_counter() - started) * 1000
        warm = timed_ms(lambda: overview.fleet_overview(plane, ADMIN), repeat)
        after = []
        who = Principal(0, "tenant", "t0")
        for _ in range(repeat):
            jobs.submit(plane, who, job_body("any:1 mem=4Gi cores=5%"))
            schedule_pass(plane)
            started = time.perf_counter()
            overview.fleet_overview(plane, ADMIN)
            after.append((time.perf_counter() - started) * 1000)
        history = FleetHistory(plane)
        clock = [plane.clock()]

        def sample() -> None:
            clock[0] += 60
            history.sample(clock[0])

        def under_lock() -> None:
            plane.read(lambda: snapshot(plane, plane.clock()))

        result = {
            "nodes": nodes,
            "devices": plane.cluster_state.n_devices,
            "jobs_holding": seen.jobs.holding,
            "jobs_pending": seen.jobs.pending,
            "stranded_memory_mib": seen.stranded.memory_mib,
            "overview_cold_ms": round(cold, 3),
            "overview_ms": warm,
            "overview_after_change_ms": round(statistics.median(after), 3),
            "history_sample_ms": timed_ms(sample, repeat),
            "history_snapshot_ms": timed_ms(under_lock, repeat),
        }
        plane.db.dispose()
        return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--nodes", type=int, nargs="+", default=[1000, 5000])
    parser.add_argument("--jobs-per-node", type=float, default=2.0)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    rows = [measure(n, args.jobs_per_node, args.repeat) for n in args.nodes]
    json.dump({"overview": rows}, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
