"""Where the ``energy`` policy's longer waits come from (issue 55): the default policy and
``energy`` at several weights on the load of ``bench/energy.py``, and, against the default, which
tasks waited longer, by shape.

    python bench/energy_wait.py [--json] [--tasks 3000] [--peak 1.3] [--seed 42] [--weights 10,0.3]
        [--cpu-cores 8]

The trace's run times do not depend on the card, so a task's JCT moves only with its wait: the
extra wait is the whole of the JCT difference. Per energy weight (the built-in profile's is 10)
it prints kWh per completed job and mean JCT and wait, as ``bench/energy.py`` meters them, the
tasks that waited longer and shorter than under the default, and the net extra wait in
task-seconds per task shape (GPUs asked, whole or shared cards, CPU cores), most first.

And, per policy, where the idle cards were while tasks waited (:class:`IdleCards`): the mean
number of whole idle cards per model over the stretches after a pass that left a task waiting,
and how many of them sat on a node with fewer than ``--cpu-cores`` free CPU cores, so that a
task asking that many could not use them (cards stranded for lack of CPU).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from energy import SLEEP_FRACTION, STAND_INS, energy_profile
from xpupool.catalog.power import PowerModel
from xpupool.engine import Profile
from xpupool.model import Allocation, Node
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


class IdleCards:
    """Told each run's start and end (``timed_replay(on_run=...)``) and each pass's tasks
    (``on_pass``): the card-seconds, per model, of whole idle cards and of those of them on a node
    with less than ``cpu_milli`` free CPU, over the stretches that follow a pass in which a task
    tried was left waiting (until the next pass)."""

    def __init__(self, nodes: Sequence[Node], cpu_milli: int, meter: EnergyMeter) -> None:
        self.meter = meter
        self.cpu_milli = cpu_milli
        self.models = sorted({d.model for n in nodes for d in n.devices})
        slot = {d.uuid: i for i, d in enumerate(d for n in nodes for d in n.devices)}
        self.slot = slot
        self.node_of = np.asarray([i for i, n in enumerate(nodes) for _ in n.devices], np.int64)
        self.model_of = np.asarray(
            [self.models.index(d.model) for n in nodes for d in n.devices], np.int64
        )
        self.cpu_free = np.asarray([n.cpu_milli for n in nodes], np.int64)
        self.held = np.zeros(len(slot), np.int64)  # thousandths of each card held
        self.runs: dict[int, Sequence[Allocation]] = {}
        self.started: set[int] = set()
        self.idle_s = np.zeros(len(self.models))
        self.stranded_s = np.zeros(len(self.models))
        self.waiting_s = 0.0
        self._since: float | None = None  # the last pass that left a task waiting
        self._idle = self._stranded = np.zeros(len(self.models))

    def on_run(self, now: int, task: int, allocations: Sequence[Allocation] | None) -> None:
        self.meter(now, task, allocations)
        sign = 1
        if allocations is None:
            allocations, sign = self.runs.pop(task, ()), -1
        else:
            self.runs[task] = allocations
            self.started.add(task)
        for alloc in allocations:
            self.cpu_free[alloc.node_index] -= sign * alloc.cpu_milli
            for share in alloc.devices:
                self.held[self.slot[share.uuid]] += sign * share.core_permille

    def on_pass(self, now: int, tried: list[int]) -> None:
        if self._since is not None:
            span = now - self._since
            self.idle_s += self._idle * span
            self.stranded_s += self._stranded * span
            self.waiting_s += span
        waiting = any(i not in self.started for i in tried)
        self.started.clear()
        self._since = float(now) if waiting else None
        if waiting:
            idle = self.held == 0
            low = self.cpu_free[self.node_of] < self.cpu_milli
            n = len(self.models)
            self._idle = np.bincount(self.model_of[idle], minlength=n).astype(np.float64)
            self._stranded = np.bincount(self.model_of[idle & low], minlength=n).astype(np.float64)

    def figures(self) -> dict[str, Any]:
        """Mean idle and CPU-stranded whole cards per model while tasks waited."""
        span = self.waiting_s or 1.0

        def per_model(card_s: np.ndarray) -> dict[str, float]:
            return {m: round(float(v / span), 1) for m, v in zip(self.models, card_s, strict=True)}

        return {
            "waiting_h": round(self.waiting_s / 3600, 1),
            "idle_cards": per_model(self.idle_s),
            "cpu_stranded_cards": per_model(self.stranded_s),
        }


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
        cards = IdleCards(load.nodes, args.cpu_cores * 1000, meter)
        result = timed_replay(
            load.nodes, load.tasks, policy, args.seed, load.workload,
            compress=load.compress, on_run=cards.on_run, on_pass=cards.on_pass,
        )  # fmt: skip
        summary = result.summary()
        done = summary["tasks"] - summary["never_placed"]
        used = meter.energy(load.nodes, power, sleep_fraction=SLEEP_FRACTION)
        row: dict[str, Any] = {
            "kwh_per_job": round(used.kwh / done, 4) if done else 0.0,
            "mean_jct_s": summary["mean_jct_s"],
            "mean_wait_s": summary["mean_wait_s"],
            "while_waiting": cards.figures(),
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
        "--cpu-cores", type=int, default=8, help="free cores a card's node lacks to count"
    )
    parser.add_argument(
        "--weights",
        type=lambda text: [float(x) for x in text.split(",")],
        default=[10.0, 0.3],
        help="energy weights, comma-separated",
    )
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(main())
