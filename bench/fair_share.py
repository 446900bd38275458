"""Fair share from history against DRF (issue 52): how each admission order treats a tenant that
bursts and one that runs steadily, on the timed replay.

    python bench/fair_share.py [--json] [--tasks N] [--peak 1.3] [--half-life 3600] [--seed 42]

Replays the Alibaba default trace (``openb_pod_list_default.csv`` on its GPU node list, as
``xpupool simulate`` finds it) with departures through the server's scheduling cycle
(``xpupool.sim.timed_replay``), split across two tenants of one queue each, no quota, no
preemption, every task priority 0: tasks alternate between them in arrival order; tenant
``steady`` keeps its tasks' trace times, tenant ``bursty`` gets the same kind and amount of work
squeezed into ``--bursts`` windows that together take ``--burst-share`` of the trace's span. The
trace is tiled and its arrivals compressed as ``bench/governance.py`` does, until peak demand is
``--peak`` times capacity. Each order then replays the same tasks: ``drf`` (the dominant share
held now) and ``history`` (the share held over a window decaying with ``--half-life`` seconds of
replay time, ``engine/cycle/fair_share.py``). Prints, per order and tenant: tasks, mean and p95
wait (s), and the whole run's summary. ``--tasks N`` replays a seeded sample of N tasks on a
proportional seeded sample of the nodes.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from dataclasses import replace
from typing import Any

import numpy as np

from xpupool.engine.cycle import Preemption, QueueSpec
from xpupool.sim.alibaba import TraceTask, capacity_milli, read_nodes, read_tasks, to_request
from xpupool.sim.load import compress_for_peak, peak_demand, tile
from xpupool.sim.queue_config import AssignRule, QueueConfig
from xpupool.sim.timed_replay import TimedResult, timed_replay
from xpupool.sim.trace_files import DEFAULT_PODS, default_nodes

TENANTS = ("steady", "bursty")
HEADROOM = 1.25  # as bench/governance.py: copies enough that the whole demand passes the peak


def split(tasks: list[TraceTask], bursts: int, burst_share: float) -> list[TraceTask]:
    """The tasks in arrival order, alternately ``steady`` (trace times kept) and ``bursty``
    (times moved into ``bursts`` evenly spaced windows, ``burst_share`` of the span in all, in
    their order); the tenant is written in ``qos``, which the queue rules match."""
    ordered = sorted(tasks, key=lambda t: (t.creation_time, t.name))
    start, end = ordered[0].creation_time, ordered[-1].creation_time
    span = max(end - start, 1)
    window = span * burst_share / bursts
    bursty = ordered[1::2]
    out = [replace(t, qos="steady") for t in ordered[0::2]]
    for k, t in enumerate(bursty):
        b, within = divmod(k * bursts, len(bursty))
        at = start + b * span / bursts + within / len(bursty) * window
        moved = int(at) - t.creation_time
        scheduled = None if t.scheduled_time is None else t.scheduled_time + moved
        out.append(
            replace(
                t,
                qos="bursty",
                creation_time=int(at),
                scheduled_time=scheduled,
                deletion_time=t.deletion_time + moved,
            )
        )
    return out


def per_tenant(result: TimedResult) -> dict[str, dict[str, float]]:
    names = np.asarray(result.queue_of)
    out: dict[str, dict[str, float]] = {}
    for tenant in TENANTS:
        mine = names == tenant
        waits = result.wait_s[mine & ~np.isnan(result.wait_s)]
        out[tenant] = {
            "tasks": int(mine.sum()),
            "never_placed": int((mine & np.isnan(result.wait_s)).sum()),
            "mean_wait_s": round(float(waits.mean()), 1) if waits.size else 0.0,
            "p95_wait_s": round(float(np.percentile(waits, 95)), 1) if waits.size else 0.0,
        }
    return out


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    nodes_path = default_nodes()
    nodes = read_nodes(str(nodes_path))
    tasks = read_tasks(str(nodes_path.parent / DEFAULT_PODS))
    if args.tasks and args.tasks < len(tasks):
        rng = random.Random(args.seed)
        nodes = rng.sample(nodes, max(1, math.ceil(args.tasks / len(tasks) * len(nodes))))
        tasks = rng.sample(tasks, args.tasks)
    from xpupool.engine.fragmentation import TargetWorkload

    workload = TargetWorkload.from_requests(to_request(t) for t in tasks)
    capacity = capacity_milli(nodes)
    whole = peak_demand(tasks, capacity, 1e12)
    copies = max(1, math.ceil(HEADROOM * args.peak / whole)) if whole else 1
    work = split(tile(tasks, copies), args.bursts, args.burst_share)
    compress = compress_for_peak(work, capacity, args.peak)
    queues = QueueConfig(
        tuple(QueueSpec(t, t, (), preemption=Preemption.NEVER) for t in TENANTS),
        tuple(AssignRule(t, 0, qos=t) for t in TENANTS),
    )
    out: dict[str, Any] = {
        "trace": DEFAULT_PODS,
        "nodes": len(nodes),
        "gpus": capacity // 1000,
        "tasks": len(work),
        "copies": copies,
        "compress": round(compress, 1),
        "peak_demand": round(peak_demand(work, capacity, compress), 3),
        "bursts": args.bursts,
        "burst_share": args.burst_share,
        "half_life_s": args.half_life,
        "policy": args.policy,
        "seed": args.seed,
    }
    for order, half_life in (("drf", None), ("history", args.half_life)):
        result = timed_replay(
            nodes,
            work,
            args.policy,
            args.seed,
            workload,
            compress=compress,
            queues=queues,
            history_half_life_s=half_life,
        )
        out[order] = {"tenants": per_tenant(result), "summary": result.summary()}
        print(f"{order}: {out[order]['tenants']}", file=sys.stderr)
    if args.json:
        print(json.dumps(out))
    else:
        print("| order | tenant | tasks | mean wait s | p95 wait s |")
        print("|---|---|---|---|---|")
        for order in ("drf", "history"):
            for tenant, row in out[order]["tenants"].items():
                print(
                    f"| {order} | {tenant} | {row['tasks']} | {row['mean_wait_s']:g} "
                    f"| {row['p95_wait_s']:g} |"
                )
    return 0


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="one JSON line on stdout")
    parser.add_argument("--tasks", type=int, default=0, help="a seeded sample (smoke test)")
    parser.add_argument("--peak", type=float, default=1.3, help="peak demand / capacity")
    parser.add_argument("--half-life", type=float, default=3600.0, help="seconds of replay time")
    parser.add_argument("--bursts", type=int, default=4)
    parser.add_argument("--burst-share", type=float, default=0.1, help="of the span, in all")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--policy", default="xpupool")
    args = parser.parse_args(argv)
    if args.tasks < 0:
        parser.error("--tasks must be positive")
    if args.peak <= 0 or args.half_life <= 0:
        parser.error("--peak and --half-life must be positive")
    if args.bursts < 1 or not 0 < args.burst_share <= 1:
        parser.error("--bursts must be at least 1 and --burst-share in (0, 1]")
    return args


if __name__ == "__main__":
    sys.exit(main())
