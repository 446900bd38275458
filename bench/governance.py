"""Governance over time on the timed replay: today's preemption planner against the
checkpoint-aware one (issue 54 part 2), and fixed-size against elastic jobs (part 1), in one
run, on the same load.

    python bench/governance.py [--json] [--tasks N] [--peak 1.3] [--seed 42] [--policy xpupool]
                               [--elastic-share 0.5]

Replays the Alibaba default trace (``openb_pod_list_default.csv`` on its GPU node list, found as
``xpupool simulate`` finds it: ``xpupool.sim.trace_files``) with departures, through the server's
scheduling cycle (``xpupool.sim.timed_replay``), with one queue that orders by QoS class (LS 2,
Burstable 1, BE 0) and lets a higher class preempt a lower one. The trace alone never loads its
pool above 0.98 (every task at once), so copies of it are laid over its span
(``xpupool.sim.load.tile``: the fewest whose whole demand is 1.25x the target) and arrivals are
compressed until peak demand is ``--peak`` times capacity. Tasks checkpoint as
``xpupool.sim.checkpoints.CheckpointModel`` draws from the seed (a quarter never; the rest every 5
to 120 minutes, log-uniform) in both runs; the planners differ only in whom they preempt. Prints,
per planner: wait (mean, p95), JCT, utilisation (mean until the last arrival), unallocated GPU % while
demand exceeds capacity, preemptions and GPU-hours lost to preemption. ``--tasks N`` replays a seeded
sample of N tasks on a proportional seeded sample of the nodes (a smoke test).
The elastic run is today's planner with ``--elastic-share`` of the tasks asking two or more
whole cards made elastic (``xpupool.sim.elastic_tasks``: half their cards at least, all at most,
run time following their size), against the same planner with none (``today``).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from xpupool.engine.cycle import Preemption
from xpupool.sim.checkpoints import CheckpointModel
from xpupool.sim.elastic_tasks import ElasticTasks
from xpupool.sim.load import default_trace_at_peak
from xpupool.sim.queue_config import QueueConfig
from xpupool.sim.timed_replay import QueueOrder, timed_replay
from xpupool.sim.trace_files import DEFAULT_PODS

PLANNERS = {"today": False, "checkpoint_aware": True}


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    load = default_trace_at_peak(args.peak, sample=args.tasks, seed=args.seed)
    nodes, tiled, compress, workload = load.nodes, load.tasks, load.compress, load.workload
    queues = QueueConfig.single(True, Preemption.LOWER_PRIORITY)
    model = CheckpointModel(args.seed)
    out: dict[str, Any] = {
        "trace": DEFAULT_PODS,
        **load.describe(),
        "policy": args.policy,
        "seed": args.seed,
        "checkpoints": {
            "never_share": model.never_share,
            "every_min": [model.min_interval_min, model.max_interval_min],
        },
    }
    runs: dict[str, dict[str, Any]] = {
        name: {"checkpoint_aware": aware} for name, aware in PLANNERS.items()
    }
    if args.elastic_share > 0:
        runs["elastic"] = {"elastic": ElasticTasks(args.elastic_share, args.seed)}
        out["elastic_share"] = args.elastic_share
    for name, options in runs.items():
        result = timed_replay(
            nodes,
            tiled,
            args.policy,
            args.seed,
            workload,
            QueueOrder.PRIORITY,
            compress,
            queues,
            checkpoints=model,
            **options,
        )
        out[name] = result.summary()
        print(f"{name}: {out[name]}", file=sys.stderr)
    today, aware_run = out["today"], out["checkpoint_aware"]
    lost = today["gpu_hours_lost"]
    out["gpu_hours_lost_change_pct"] = (
        round(100 * (aware_run["gpu_hours_lost"] - lost) / lost, 1) if lost else 0.0
    )
    out["p95_wait_change_pct"] = _change(today["p95_wait_s"], aware_run["p95_wait_s"])
    out["mean_wait_change_pct"] = _change(today["mean_wait_s"], aware_run["mean_wait_s"])
    if "elastic" in out:
        on = out["elastic"]
        out["elastic_util_change_pts"] = round(on["mean_util_pct"] - today["mean_util_pct"], 2)
        out["elastic_p95_wait_change_pct"] = _change(today["p95_wait_s"], on["p95_wait_s"])
    if args.json:
        print(json.dumps(out))
    else:
        _table(out)
    return 0


def _change(before: float, after: float) -> float:
    return round(100 * (after - before) / before, 1) if before else 0.0


def _table(out: dict[str, Any]) -> None:
    keys = (
        "mean_wait_s",
        "p95_wait_s",
        "mean_jct_s",
        "mean_util_pct",
        "unallocated_at_peak_pct",
        "preemptions",
        "gpu_hours_lost",
    )
    print("| planner | " + " | ".join(keys) + " |")
    print("|---" * (len(keys) + 1) + "|")
    for name in (*PLANNERS, *(("elastic",) if "elastic" in out else ())):
        print(f"| {name} | " + " | ".join(f"{out[name][k]:g}" for k in keys) + " |")
    print(
        f"GPU-hours lost {out['gpu_hours_lost_change_pct']:+.1f} %, "
        f"p95 wait {out['p95_wait_change_pct']:+.1f} %, "
        f"mean wait {out['mean_wait_change_pct']:+.1f} %"
    )
    if "elastic" in out:
        print(
            f"elastic ({out['elastic_share']:g} of multi-card tasks): utilisation "
            f"{out['elastic_util_change_pts']:+.2f} points, "
            f"p95 wait {out['elastic_p95_wait_change_pct']:+.1f} %"
        )


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="one JSON line on stdout")
    parser.add_argument("--tasks", type=int, default=0, help="a seeded sample (smoke test)")
    parser.add_argument("--peak", type=float, default=1.3, help="peak demand / capacity")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--policy", default="xpupool")
    parser.add_argument(
        "--elastic-share",
        type=float,
        default=0.5,
        help="share of the multi-card whole-card tasks made elastic in the elastic run (0: none)",
    )
    args = parser.parse_args(argv)
    if args.tasks < 0:
        parser.error("--tasks must be positive")
    if args.peak <= 0:
        parser.error("--peak must be positive")
    if not 0 <= args.elastic_share <= 1:
        parser.error("--elastic-share must be within 0..1")
    return args


if __name__ == "__main__":
    sys.exit(main())
