"""Governance over time on the timed replay: today's preemption planner against the
checkpoint-aware one (issue 54 part 2), fixed-size against elastic jobs (part 1), reservations
lent until they begin against the same reservations held idle (part 4), and online
defragmentation off and on (part 3), in one run, on the same load.

    python bench/governance.py [--json] [--tasks N] [--peak 1.3] [--seed 42] [--policy xpupool]
                               [--part all|planners|reservations|defrag] [--elastic-share 0.5]
                               [--reservations K] [--defrag-moves-per-hour 60]
                               [--defrag-lost-gpu-hours H] [--philly VC [--philly-classes]]

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

``--philly VC`` replays instead one Philly virtual cluster's trace from Gavel's data
(``msr/seed=0/VC.trace`` in ``--gavel-data``, by default ../shared/traces/gavel) on Gavel's
homogeneous Philly cluster (``msr/cluster_specs.json``: 500 V100, kept as 62 servers of 8), each
job a fixed task of its scale factor of V100s on one server, running its total steps at its
isolated V100 throughput (``xpupool.sim.gavel_trace.fixed_tasks``). Its jobs ask 2 to 8 whole cards
far more often than the Alibaba default trace's, which is what elastic jobs, reservations and
defragmentation act on. The Philly traces record no QoS class, so every task is of one class and
none is preempted, unless ``--philly-classes`` draws classes in the Alibaba trace's shares
(:data:`PHILLY_CLASSES`). Next to the mean utilisation (which no mechanism here can raise above
the offered load) the results give the utilisation while demand exceeds capacity (100 - unallocated
at peak): what elastic jobs gain and what a reservation held idle costs.

Reservations: ``--reservations K`` windows, each holding 8 whole cards for a tenth of the arrival
window, evenly over it, each with one LS task submitted into it a sixth of its length ahead that
runs three quarters of it (``xpupool.sim.reservation_plan.fixed_windows``); Burstable and BE
tasks are preemptible, so may borrow reserved cards before a window, LS tasks only when they end
before it. Three runs with
the checkpoint-aware planner: no reservation (the reserved tasks queue as any task), the cards
held idle from the start until each window ends (Slurm's way) and lent until each window
begins. Prints each run's summary, the reserved tasks' start delays after their windows began,
and the utilisation each costs against no reservation.

Defragmentation: three runs with the checkpoint-aware planner, without and with online
defragmentation (``xpupool.engine.cycle.defrag``: a task that fits nowhere has the fewest
checkpointing tasks of its class or below moved, each checkpointed, stopped and requeued, within
``--defrag-moves-per-hour`` per tenant (the one queue is one tenant) and ``--defrag-lost-gpu-hours``
a day, by default 1 % of the pool's GPU-hours a day; hours and days of the compressed trace).
Prints each run's summary, the mean wait of large tasks (4 or more whole cards) and its change,
the moves and the GPU-hours they lost (and their share of the GPU-hours served), and unallocated
GPU % over time (the mean over each tenth of the arrival window) for each. The third run adds
consolidation in quiet periods (``xpupool.engine.cycle.consolidate``, its default rule: no task
waiting for 600 s of trace time, at most 3 moves a call) within the same budget.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from xpupool.engine.cycle import Preemption
from xpupool.engine.cycle.consolidate import ConsolidationRule
from xpupool.engine.cycle.defrag import DisruptionBudget
from xpupool.sim import gavel_trace
from xpupool.sim.alibaba import TraceTask
from xpupool.sim.checkpoints import CheckpointModel
from xpupool.sim.elastic_tasks import ElasticTasks
from xpupool.sim.load import PeakLoad, default_trace_at_peak, peak_load
from xpupool.sim.queue_config import QueueConfig
from xpupool.sim.reservation_plan import fixed_windows
from xpupool.sim.timed_replay import QueueOrder, timed_replay
from xpupool.sim.trace_files import DEFAULT_PODS

GAVEL_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "traces" / "gavel"
PLANNERS = {"today": False, "checkpoint_aware": True}
HOLDING = ("none", "held_idle", "lent")  # the reservation runs


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    load, trace = _load(args)
    queues = QueueConfig.single(True, Preemption.LOWER_PRIORITY)
    model = CheckpointModel(args.seed)
    out: dict[str, Any] = {
        "trace": trace,
        **load.describe(),
        "policy": args.policy,
        "seed": args.seed,
        "checkpoints": {
            "never_share": model.never_share,
            "every_min": [model.min_interval_min, model.max_interval_min],
        },
    }
    if args.part in ("all", "planners"):
        _planners(args, load, queues, model, out)
    if args.part in ("all", "reservations"):
        out["reservations"] = _reservations(args, load, queues, model)
    if args.part in ("all", "defrag"):
        out["defrag"] = _defrag(args, load, queues, model)
    if args.json:
        print(json.dumps(out))
    else:
        _table(out)
    return 0


def _load(args: argparse.Namespace) -> tuple[PeakLoad, str]:
    """The Alibaba default trace, or with ``--philly VC`` that Philly virtual cluster's Gavel
    trace on Gavel's homogeneous cluster (500 V100 in servers of 8: 496 cards), at ``--peak``."""
    if args.philly is None:
        return default_trace_at_peak(args.peak, sample=args.tasks, seed=args.seed), DEFAULT_PODS
    trace = args.gavel_data / "msr" / "seed=0" / f"{args.philly}.trace"
    specs = json.loads((args.gavel_data / "msr" / "cluster_specs.json").read_text())
    matrix = gavel_trace.GavelMatrix.load(args.gavel_data / "simulation_throughputs.json")
    tasks = gavel_trace.fixed_tasks(gavel_trace.read_trace(trace), matrix)
    if args.philly_classes:
        tasks = _with_classes(tasks, args.seed)
    nodes = gavel_trace.cluster(specs["philly"][0])
    load = peak_load(nodes, tasks, args.peak, sample=args.tasks, seed=args.seed)
    return load, f"msr/seed=0/{trace.name}"


# The Alibaba default trace's QoS classes among its tasks of whole cards (LS 3,252, BE 629,
# Burstable 99, Guaranteed 6 left out): the Philly traces record none.
PHILLY_CLASSES = (("LS", 3252), ("Burstable", 99), ("BE", 629))


def _with_classes(tasks: list[TraceTask], seed: int) -> list[TraceTask]:
    """``tasks`` each given a QoS class drawn from ``seed`` in :data:`PHILLY_CLASSES`' shares."""
    names = [name for name, _ in PHILLY_CLASSES]
    counts = np.array([n for _, n in PHILLY_CLASSES], np.float64)
    drawn = np.random.default_rng(seed).choice(len(names), len(tasks), p=counts / counts.sum())
    return [replace(t, qos=names[int(k)]) for t, k in zip(tasks, drawn, strict=True)]


def _planners(
    args: argparse.Namespace,
    load: PeakLoad,
    queues: QueueConfig,
    model: CheckpointModel,
    out: dict[str, Any],
) -> None:
    """Today's planner, the checkpoint-aware one and (with ``--elastic-share``) today's with
    elastic jobs, on the same load, into ``out``."""
    nodes, tiled, compress, workload = load.nodes, load.tasks, load.compress, load.workload
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
        # busy while demand exceeds capacity: the mean over the window cannot rise above the
        # offered load, which elastic jobs do not change
        out["elastic_util_at_peak_change_pts"] = round(
            today["unallocated_at_peak_pct"] - on["unallocated_at_peak_pct"], 2
        )
        out["elastic_p95_wait_change_pct"] = _change(today["p95_wait_s"], on["p95_wait_s"])


def _reservations(
    args: argparse.Namespace, load: PeakLoad, queues: QueueConfig, model: CheckpointModel
) -> dict[str, Any]:
    """The three reservation runs (see the module docstring) and what each costs."""
    cards = min(8, max(len(n.devices) for n in load.nodes))
    out: dict[str, Any] = {"count": args.reservations, "cards": cards}
    for holding in HOLDING:
        tasks, plan = fixed_windows(
            load.tasks,
            load.compress,
            nodes=load.nodes,
            count=args.reservations,
            lend=holding == "lent",
            borrow_below=2,
        )
        runs = _Runs()
        result = timed_replay(
            load.nodes,
            tasks,
            args.policy,
            args.seed,
            load.workload,
            QueueOrder.PRIORITY,
            load.compress,
            queues,
            checkpoints=model,
            checkpoint_aware=True,
            reservations=None if holding == "none" else plan,
            on_run=runs.on_run,
        )
        arrive_at = [int(t.creation_time / load.compress) for t in tasks]
        delays = plan.start_delays_s(result.wait_s, arrive_at)
        out[holding] = {
            **result.summary(),
            "reserved_start_delay_s": [round(d, 1) for d in delays],
        }
        if holding != "none":
            first = min(arrive_at)
            starts = {r.name: r.start_s for r in plan.reservations}
            windows = {i: starts[name] for i, name in plan.members.items()}
            out[holding]["reserved_cards_busy_before_pct"] = runs.busy_before(first, windows)
        print(f"reservations {holding}: {out[holding]}", file=sys.stderr)
    base = out["none"]["mean_util_pct"]
    idle_cost = base - out["held_idle"]["mean_util_pct"]
    lent_cost = base - out["lent"]["mean_util_pct"]
    out["util_cost_held_idle_pts"] = round(idle_cost, 3)
    out["util_cost_lent_pts"] = round(lent_cost, 3)
    out["lent_cost_share_of_idle"] = round(lent_cost / idle_cost, 3) if idle_cost > 0 else None
    # the same costs while demand exceeds capacity (unallocated GPU % then, against none)
    peak = out["none"]["unallocated_at_peak_pct"]
    idle_peak = out["held_idle"]["unallocated_at_peak_pct"] - peak
    lent_peak = out["lent"]["unallocated_at_peak_pct"] - peak
    out["util_at_peak_cost_held_idle_pts"] = round(idle_peak, 3)
    out["util_at_peak_cost_lent_pts"] = round(lent_peak, 3)
    return out


def _defrag(
    args: argparse.Namespace, load: PeakLoad, queues: QueueConfig, model: CheckpointModel
) -> dict[str, Any]:
    """Defragmentation off and on, on the same load (see the module docstring)."""
    lost_day = args.defrag_lost_gpu_hours
    if lost_day is None:  # 1 % of the pool's GPU-hours a day
        lost_day = 0.01 * 24 * sum(len(n.devices) for n in load.nodes)
    budget = DisruptionBudget(args.defrag_moves_per_hour, lost_day)
    out: dict[str, Any] = {
        "budget": {
            "moves_per_tenant_hour": budget.moves_per_tenant_hour,
            "lost_gpu_hours_day": budget.lost_gpu_hours_day,
        }
    }
    quiet = ConsolidationRule()
    runs = (("off", None, None), ("on", budget, None), ("consolidate", budget, quiet))
    for name, on, consolidate in runs:
        result = timed_replay(
            load.nodes,
            load.tasks,
            args.policy,
            args.seed,
            load.workload,
            QueueOrder.PRIORITY,
            load.compress,
            queues,
            checkpoints=model,
            checkpoint_aware=True,
            defrag=on,
            consolidate=consolidate,
        )
        out[name] = {
            **result.summary(),
            "large_tasks": int(result.large.sum()) if result.large is not None else 0,
            "large_mean_wait_s": result.large_mean_wait_s(),
            "gpu_hours_served": round(result.gpu_hours_served, 1),
            "unallocated_pct_over_time": result.unallocated_over_time(),
        }
        print(f"defrag {name}: {out[name]}", file=sys.stderr)
    out["large_mean_wait_change_pct"] = _change(
        out["off"]["large_mean_wait_s"], out["on"]["large_mean_wait_s"]
    )
    out["mean_wait_change_pct"] = _change(out["off"]["mean_wait_s"], out["on"]["mean_wait_s"])
    out["consolidate_large_mean_wait_change_pct"] = _change(
        out["off"]["large_mean_wait_s"], out["consolidate"]["large_mean_wait_s"]
    )
    out["consolidate_quiet_s"] = quiet.quiet_s
    return out


class _Runs:
    """Each run's span and cards (``timed_replay``'s ``on_run``), to tell how much of the
    reserved cards' time before their windows did other work."""

    def __init__(self) -> None:
        self.open: dict[int, tuple[int, frozenset[str]]] = {}
        self.done: list[tuple[int, int, frozenset[str], int]] = []  # (start, end, cards, task)

    def on_run(self, now: int, task: int, allocations: Any) -> None:
        if allocations is not None:
            cards = frozenset(u for a in allocations for u in a.device_uuids)
            self.open[task] = (now, cards)
            return
        begun = self.open.pop(task, None)
        if begun is not None:
            self.done.append((begun[0], now, begun[1], task))

    def busy_before(self, first: int, windows: dict[int, float]) -> float:
        """Per cent of the reserved cards' time from ``first`` (the first arrival) until their
        window began that other tasks ran on them; a window's cards are those its booked task
        (``windows``: task -> window start) ran on, the whole shape."""
        held = {t: c for _, _, c, t in self.done if t in windows}
        busy = total = 0.0
        for task, start in windows.items():
            cards = held.get(task, frozenset())
            total += len(cards) * max(0.0, start - first)
            for begin, end, used, other in self.done:
                if other in windows:
                    continue
                overlap = min(end, start) - max(begin, first)
                if overlap > 0:
                    busy += overlap * len(used & cards)
        return round(100 * busy / total, 1) if total else 0.0


def _change(before: float, after: float) -> float:
    return round(100 * (after - before) / before, 1) if before else 0.0


def _table(out: dict[str, Any]) -> None:
    if "today" in out:
        _planner_table(out)
    held = out.get("reservations")
    if held is not None:
        _reservation_table(held)
    if "defrag" in out:
        _defrag_table(out["defrag"])


def _defrag_table(runs: dict[str, Any]) -> None:
    keys = (
        "mean_wait_s",
        "large_mean_wait_s",
        "p95_wait_s",
        "mean_util_pct",
        "unallocated_at_peak_pct",
        "preemptions",
    )

    def moved(run: dict[str, Any]) -> list[str]:
        if "moves" not in run:
            return ["-", "-"]
        lost = f"{run['gpu_hours_lost_moves']:g} ({run['lost_moves_pct_of_served']:g} %)"
        return [f"{run['moves']:g}", lost]

    extra = ("moves", "lost to moves GPU-h (% served)")
    names = ("off", "on", "consolidate")
    _rows("defrag", keys, {n: runs[n] for n in names if n in runs}, extra, moved)
    print(
        f"large tasks' mean wait {runs['large_mean_wait_change_pct']:+.1f} %, "
        f"mean wait {runs['mean_wait_change_pct']:+.1f} %"
    )
    if "consolidate" in runs:
        change = runs["consolidate_large_mean_wait_change_pct"]
        print(f"large tasks' mean wait with consolidation {change:+.1f} %")
    for name in names:
        series = ", ".join(f"{v:g}" for v in runs[name]["unallocated_pct_over_time"])
        print(f"unallocated GPU % over time, defrag {name}: {series}")


def _rows(
    label: str,
    keys: tuple[str, ...],
    runs: dict[str, dict[str, Any]],
    extra: tuple[str, ...] = (),
    cells: Callable[[dict[str, Any]], list[str]] | None = None,
) -> None:
    """A markdown table: one row per run, its ``keys`` and then the ``extra`` columns ``cells``
    fills."""
    head = [label, *keys, *extra]
    print("| " + " | ".join(head) + " |")
    print("|---" * len(head) + "|")
    for name, run in runs.items():
        row = [name, *(f"{run[k]:g}" for k in keys), *(cells(run) if cells else [])]
        print("| " + " | ".join(row) + " |")


def _planner_table(out: dict[str, Any]) -> None:
    keys = (
        "mean_wait_s",
        "p95_wait_s",
        "mean_jct_s",
        "mean_util_pct",
        "unallocated_at_peak_pct",
        "preemptions",
        "gpu_hours_lost",
    )
    names = (*PLANNERS, *(("elastic",) if "elastic" in out else ()))
    _rows("planner", keys, {name: out[name] for name in names})
    print(
        f"GPU-hours lost {out['gpu_hours_lost_change_pct']:+.1f} %, "
        f"p95 wait {out['p95_wait_change_pct']:+.1f} %, "
        f"mean wait {out['mean_wait_change_pct']:+.1f} %"
    )
    if "elastic" in out:
        print(
            f"elastic ({out['elastic_share']:g} of multi-card tasks): utilisation "
            f"{out['elastic_util_change_pts']:+.2f} points "
            f"({out['elastic_util_at_peak_change_pts']:+.2f} while demand exceeds capacity), "
            f"p95 wait {out['elastic_p95_wait_change_pct']:+.1f} %"
        )


def _reservation_table(held: dict[str, Any]) -> None:
    head = "mean_util_pct | p95_wait_s | preemptions | reserved start delays s | busy before %"
    print(f"| reservations | {head} |")
    print("|---|---|---|---|---|---|")
    for name in HOLDING:
        run = held[name]
        delays = ", ".join(f"{d:g}" for d in run["reserved_start_delay_s"])
        busy = run.get("reserved_cards_busy_before_pct", "-")
        cells = (run["mean_util_pct"], run["p95_wait_s"], run["preemptions"])
        row = " | ".join(f"{c:g}" for c in cells)
        print(f"| {name} | {row} | {delays} | {busy} |")
    print(
        f"utilisation cost: held idle {held['util_cost_held_idle_pts']:g} pts, "
        f"lent {held['util_cost_lent_pts']:g} pts; while demand exceeds capacity: held idle "
        f"{held['util_at_peak_cost_held_idle_pts']:g} pts, lent {held['util_at_peak_cost_lent_pts']:g}"
    )


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="one JSON line on stdout")
    parser.add_argument("--tasks", type=int, default=0, help="a seeded sample (smoke test)")
    parser.add_argument("--peak", type=float, default=1.3, help="peak demand / capacity")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--policy", default="xpupool")
    parser.add_argument(
        "--part", choices=("all", "planners", "reservations", "defrag"), default="all"
    )
    parser.add_argument(
        "--elastic-share",
        type=float,
        default=0.5,
        help="share of the multi-card whole-card tasks made elastic in the elastic run (0: none)",
    )
    parser.add_argument(
        "--philly",
        metavar="VC",
        help="replay this Philly virtual cluster's Gavel trace (msr/seed=0/VC.trace) on "
        "Gavel's 500-V100 cluster instead of the Alibaba default trace",
    )
    parser.add_argument(
        "--philly-classes",
        action="store_true",
        help="give the Philly tasks QoS classes drawn in the Alibaba trace's shares (so that "
        "a higher class preempts a lower one; without it none is preempted)",
    )
    parser.add_argument(
        "--gavel-data",
        type=Path,
        default=GAVEL_DATA,
        help="Gavel's data folder (msr/, simulation_throughputs.json); default: "
        "../shared/traces/gavel beside the checkout",
    )
    parser.add_argument("--reservations", type=int, default=4, help="windows held (part 4)")
    parser.add_argument(
        "--defrag-moves-per-hour", type=int, default=60, help="moves per tenant per hour (part 3)"
    )
    parser.add_argument(
        "--defrag-lost-gpu-hours",
        type=float,
        default=None,
        help="GPU-hours moves may lose a day (default: 1 %% of the pool's)",
    )
    args = parser.parse_args(argv)
    if args.philly is not None:
        folder = args.gavel_data / "msr" / "seed=0"
        if "/" in args.philly or not (folder / f"{args.philly}.trace").is_file():
            parser.error(f"--philly: no trace {args.philly!r} in {folder}")
    elif args.philly_classes:
        parser.error("--philly-classes needs --philly")
    if args.tasks < 0:
        parser.error("--tasks must be positive")
    if args.peak <= 0:
        parser.error("--peak must be positive")
    if not 0 <= args.elastic_share <= 1:
        parser.error("--elastic-share must be within 0..1")
    if args.reservations < 1:
        parser.error("--reservations must be at least 1")
    lost = args.defrag_lost_gpu_hours
    if args.defrag_moves_per_hour < 0 or (lost is not None and not lost >= 0):
        parser.error("--defrag-moves-per-hour and --defrag-lost-gpu-hours must not be negative")
    return args


if __name__ == "__main__":
    sys.exit(main())
