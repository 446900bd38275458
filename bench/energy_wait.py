"""Where the ``energy`` policy's longer waits come from (issue 55): the default policy and
``energy`` at several weights on the load of ``bench/energy.py``, and, against the default, which
tasks waited longer, by shape.

    python bench/energy_wait.py [--json] [--tasks 3000] [--peak 1.3] [--seed 42] [--weights 10,0.3]

The trace's run times do not depend on the card, so a task's JCT moves only with its wait: the
extra wait is the whole of the JCT difference. Per energy weight (the built-in profile's is 10)
it prints kWh per completed job and mean JCT and wait, as ``bench/energy.py`` meters them, the
tasks that waited longer and shorter than under the default, and the net extra wait in
task-seconds per task shape (GPUs asked, whole or shared cards, CPU cores), most first.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from energy import SLEEP_FRACTION, STAND_INS, energy_profile
from xpupool.catalog.power import PowerModel
from xpupool.engine import Profile
from xpupool.sim.alibaba import TraceTask
from xpupool.sim.energy import EnergyMeter
from xpupool.sim.load import default_trace_at_peak
from xpupool.sim.timed_replay import TimedResult, timed_replay


def weighted(weight: float) -> Profile:
    """The bench's ``energy`` profile with the energy scorer at ``weight``."""
    base = energy_profile(SLEEP_FRACTION)
    return replace(
        base, scorers=tuple((n, weight if n == "energy" else w) for n, w in base.scorers)
    )


def shape(task: TraceTask) -> str:
    if task.num_gpu == 0:
        return f"CPU only, {'>=8' if task.cpu_milli >= 8000 else '<8'} CPU"
    cards = "shared" if task.gpu_milli < 1000 else "whole"
    return f"{task.num_gpu} GPU {cards}, {'>=8' if task.cpu_milli >= 8000 else '<8'} CPU"


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    load = default_trace_at_peak(args.peak, sample=args.tasks, seed=args.seed)
    power = PowerModel(overrides=STAND_INS)
    out: dict[str, Any] = {"tasks": len(load.tasks), "seed": args.seed, "peak": args.peak}
    base: TimedResult | None = None
    policies: list[tuple[str, Profile | str]] = [("xpupool", "xpupool")]
    policies += [(f"energy@{w:g}", weighted(w)) for w in args.weights]
    for name, policy in policies:
        meter = EnergyMeter()
        result = timed_replay(
            load.nodes, load.tasks, policy, args.seed, load.workload,
            compress=load.compress, on_run=meter,
        )  # fmt: skip
        summary = result.summary()
        done = summary["tasks"] - summary["never_placed"]
        used = meter.energy(load.nodes, power, sleep_fraction=SLEEP_FRACTION)
        row: dict[str, Any] = {
            "kwh_per_job": round(used.kwh / done, 4) if done else 0.0,
            "mean_jct_s": summary["mean_jct_s"],
            "mean_wait_s": summary["mean_wait_s"],
        }
        if base is None:
            base = result
        else:
            extra = np.nan_to_num(result.wait_s - base.wait_s)
            by_shape: dict[str, float] = {}
            for i, seconds in enumerate(extra):
                key = shape(load.tasks[i])
                by_shape[key] = by_shape.get(key, 0.0) + float(seconds)
            row["waited_longer"] = int((extra > 0).sum())
            row["waited_shorter"] = int((extra < 0).sum())
            ranked = sorted(by_shape.items(), key=lambda kv: -kv[1])[:5]
            row["extra_wait_task_s_by_shape"] = {k: round(v) for k, v in ranked}
        out[name] = row
        print(f"{name}: {row}", file=sys.stderr)
    print(json.dumps(out) if args.json else json.dumps(out, indent=1))
    return 0


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="one line of JSON")
    parser.add_argument("--tasks", type=int, default=3000, help="a seeded sample; 0: all")
    parser.add_argument("--peak", type=float, default=1.3, help="peak demand / capacity")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument(
        "--weights",
        type=lambda text: [float(x) for x in text.split(",")],
        default=[10.0, 0.3],
        help="energy weights, comma-separated",
    )
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(main())
