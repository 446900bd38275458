"""The partition study (issue 53): hardware partitions against software shares, and who re-cuts best.

    python bench/partitions.py [--json] [--tasks N] [--seeds K] [--policy xpupool]
    python bench/partitions.py --timed [--peak 1.3] [--json] [--tasks N] [--seeds K]

On the FGD protocol (``xpupool.sim.fgd_protocol``: the default trace shuffled per seed and tuned
to 130 % of capacity, one task at a time, no departures), with the Alibaba pool's cards replaced
by MIG-capable ones (``xpupool.sim.partition_replay.mig_pool``): per mix of models (a row each),
per share of the nodes in partition mode (all, half; none is software shares only, today), per
cut policy: static layouts (every partitioned card cut 4g.40gb@0 + 2g.20gb@4 + 1g.10gb@6 from the
start, as KAI's static MIG; the NVIDIA MIG guide's example mix), HAMi v2.10's rule
(``xpupool.engine.hami_mig.hami_mig_choice``, when that module is there; else the row is left
out and ``hami`` says so) and xpupool's re-cut choice (``xpupool.engine.partition_recut``). Prints,
mean and sd over seeds 42.., the unallocated GPU % when arrived demand first reaches capacity
(placed demand counts what tasks asked, so a partition larger than its task leaves the rest
unallocated), tasks failed, re-cuts (card layout changes) and instances destroyed, and the price
of isolation: unallocated GPU with all cards partitioned over unallocated GPU with software
shares, per cut policy, from the same run. ``--tasks N`` replays a seeded sample of N tasks (before
tuning) on a proportional seeded sample of the nodes; ``--seeds K`` the first K seeds.

``--timed``: the timed replay with departures instead (``xpupool.sim.partition_timed``): the
default trace tiled and its arrivals compressed until peak demand is ``--peak`` x capacity as the
queueing benchmarks do (``xpupool.sim.load.peak_load``; ``--tasks N`` samples it per seed), one
FIFO queue, tasks running for their recorded durations; the A100-80GB mix only (the 1:1 mix's
models cut alike). A task asks one request there: its profile when a card is in partition
mode, else a share; whole cards when a card is not in partition mode, else as many 7g.80gb
instances. A partition request no free instance holds has a card re-cut at once by the cut
policy's rule, destroying free instances where the new one needs their slices. Prints per row,
mean and sd over seeds: wait (mean, p95), unallocated GPU % over time (the mean over each tenth
of the arrival window, and the mean of those tenths), unallocated GPU % while demand exceeds
capacity, tasks never placed, re-cuts (also per task placed) and instances destroyed; the
price of isolation as above, on the mean of the tenths; and xpupool's figures minus HAMi's on
the same seed (mean, sd, seeds where xpupool's is lower). ``--leave-out 4g.40gb`` drops the
fractional tasks that would ask those profiles from the trace before the load is made, for every
row: HAMi's rule cuts no 4g, so without them both rules serve the same tasks and their re-cuts
count the same work.
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import sys
from collections.abc import Sequence
from typing import Any

from xpupool.catalog.partition_geometry import Instance, Layout
from xpupool.catalog.partitions import PartitionScheme, load_partitions
from xpupool.engine.fragmentation import TargetWorkload
from xpupool.engine.partition_recut import recut_choice
from xpupool.engine.recut_proposal import RecutRule
from xpupool.sim.alibaba import capacity_milli
from xpupool.sim.fgd_protocol import tuned_workload
from xpupool.sim.load import default_trace, peak_load, sampled
from xpupool.sim.partition_replay import (
    CutPolicy,
    MigPool,
    mig_pool,
    partition_replay,
    profile_for,
    task_requests,
)
from xpupool.sim.partition_timed import TimedPartitions, timed_request
from xpupool.sim.timed_replay import timed_replay
from xpupool.sim.trace_files import DEFAULT_PODS

MIXES: dict[str, tuple[tuple[str, float], ...]] = {
    "A100-80GB": (("A100-SXM4-80GB", 1.0),),
    "A100-80GB+H100-80GB 1:1": (("A100-SXM4-80GB", 0.5), ("H100-SXM5-80GB", 0.5)),
}
MODES = {"all": 1.0, "half": 0.5}
STATIC = (("4g.40gb", 0), ("2g.20gb", 4), ("1g.10gb", 6))


def hami_rule() -> RecutRule | None:
    """HAMi v2.10's rule when ``engine/hami_mig.py`` is in this build (branch s11-hami)."""
    try:
        module = importlib.import_module("xpupool.engine.hami_mig")
    except ImportError:
        return None
    rule: RecutRule | None = getattr(module, "hami_mig_choice", None)
    return rule


def cut_policies(workload: TargetWorkload) -> list[CutPolicy]:
    """The cut policies compared, in table order (HAMi's only when its rule is here)."""
    out = [CutPolicy("static", static=STATIC)]
    hami = hami_rule()
    if hami is not None:
        out.append(CutPolicy("hami", rule=hami))

    def xpupool(
        scheme: PartitionScheme, cards: Sequence[tuple[Layout, frozenset[Instance]]], profile: str
    ) -> tuple[int, Layout] | None:
        return recut_choice(scheme, cards, profile, workload)

    out.append(CutPolicy("xpupool", rule=xpupool))
    return out


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    if args.timed:
        return _timed(args)
    nodes, tasks = sampled(*default_trace(), args.tasks, 42)
    seeds = list(range(42, 42 + args.seeds))
    rows: list[dict[str, Any]] = []
    for mix_name, mix in MIXES.items():
        runs: dict[tuple[str, str], list[Any]] = {}
        for seed in seeds:
            tuned = tuned_workload(tasks, capacity_milli(nodes), seed)
            for mode, share in {"none": 0.0, **MODES}.items():
                pool = mig_pool(nodes, mix, share, seed)
                workload = _workload(pool, tuned)
                policies = [CutPolicy("shares")] if share == 0 else cut_policies(workload)
                for cutting in policies:
                    run = partition_replay(pool, tuned, args.policy, cutting, seed, workload)
                    runs.setdefault((mode, cutting.name), []).append(run)
                    print(f"{mix_name} {mode} {cutting.name} seed {seed}: {run}", file=sys.stderr)
        rows.extend(_rows(mix_name, runs))
    out: dict[str, Any] = {
        "trace": DEFAULT_PODS,
        "nodes": len(nodes),
        "gpus": capacity_milli(nodes) // 1000,
        "trace_tasks": len(tasks),
        "seeds": seeds,
        "policy": args.policy,
        "static_layout": [f"{n}@{s}" for n, s in STATIC],
        "hami": "v2.10 rule (engine/hami_mig.py)"
        if hami_rule()
        else "left out: no hami_mig_choice",
        "rows": rows,
        "isolation_price": _isolation_price(rows),
    }
    if args.json:
        print(json.dumps(out))
    else:
        _table(out)
    return 0


TIMED_KEYS = (
    "mean_wait_s",
    "p95_wait_s",
    "unallocated_pct",
    "unallocated_at_peak_pct",
    "never_placed",
    "recuts",
    "recuts_per_placed",
    "destroyed",
)


def _timed(args: argparse.Namespace) -> int:
    """The timed replay with departures (see the module docstring)."""
    all_nodes, all_tasks = default_trace()
    seeds = list(range(42, 42 + args.seeds))
    mix_name, mix = next(iter(MIXES.items()))
    left_out = {p for p in args.leave_out.split(",") if p}
    if left_out:
        scheme = load_partitions().scheme_for(mix[0][0])
        assert scheme is not None
        unknown = left_out - {p.name for p in scheme.profiles}
        if unknown:
            raise SystemExit(f"--leave-out: {sorted(unknown)} are not profiles of {mix[0][0]}")
        all_tasks = [
            t
            for t in all_tasks
            if not (0 < t.gpu_milli < 1000 and profile_for(scheme, t.gpu_milli) in left_out)
        ]
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    described: dict[str, Any] = {}
    for seed in seeds:
        load = peak_load(all_nodes, all_tasks, args.peak, sample=args.tasks, seed=seed)
        described = load.describe()
        for mode, share in {"none": 0.0, **MODES}.items():
            pool = mig_pool(load.nodes, mix, share, seed)
            workload = TargetWorkload.from_requests(timed_request(t, pool) for t in load.tasks)
            policies = [CutPolicy("shares")] if share == 0 else cut_policies(workload)
            for cutting in policies:
                front = TimedPartitions(pool, cutting, args.policy, seed, workload)
                result = timed_replay(
                    pool.nodes,
                    load.tasks,
                    args.policy,
                    seed,
                    workload,
                    compress=load.compress,
                    partitions=front,
                )
                summary = result.summary()
                tenths = result.unallocated_over_time()
                run = {
                    **{k: summary[k] for k in TIMED_KEYS if k in summary},
                    "unallocated_pct": round(sum(tenths) / len(tenths), 2) if tenths else 0.0,
                    "unallocated_pct_over_time": tenths,
                    "recuts": front.recuts,
                    "recuts_per_placed": round(
                        front.recuts / max(1.0, summary["tasks"] - summary["never_placed"]), 4
                    ),
                    "destroyed": front.destroyed,
                    "seconds": round(result.seconds, 1),
                }
                runs.setdefault((mode, cutting.name), []).append(run)
                print(f"timed {mode} {cutting.name} seed {seed}: {run}", file=sys.stderr)
    rows = [
        {
            "mix": mix_name,
            "partitioned": mode,
            "cut": cut,
            **{k: _mean_sd([float(r[k]) for r in found]) for k in TIMED_KEYS},
            "unallocated_pct_over_time": [
                round(statistics.fmean(r["unallocated_pct_over_time"][i] for r in found), 1)
                for i in range(len(found[0]["unallocated_pct_over_time"]))
            ],
            "seconds_per_run": round(statistics.fmean(r["seconds"] for r in found), 1),
        }
        for (mode, cut), found in runs.items()
    ]
    out: dict[str, Any] = {
        "mode": "timed",
        "trace": DEFAULT_PODS,
        "left_out": sorted(left_out),
        **described,
        "peak": args.peak,
        "seeds": seeds,
        "policy": args.policy,
        "static_layout": [f"{n}@{s}" for n, s in STATIC],
        "hami": "v2.10 rule (engine/hami_mig.py)" if hami_rule() else "left out",
        "rows": rows,
        "isolation_price": _isolation_price(rows),
        "xpupool_minus_hami": _paired(runs),
    }
    if args.json:
        print(json.dumps(out))
    else:
        _table(out, TIMED_KEYS)
        print(f"xpupool - hami, per seed: {out['xpupool_minus_hami']}")
    return 0


def _paired(runs: dict[tuple[str, str], list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Per share partitioned and figure, xpupool's minus HAMi's on the same seed: mean, sd and
    the number of seeds where xpupool's is lower (empty without HAMi's rule)."""
    out: dict[str, dict[str, Any]] = {}
    for mode in MODES:
        ours, theirs = runs.get((mode, "xpupool")), runs.get((mode, "hami"))
        if not ours or not theirs:
            continue
        keys = ("unallocated_pct", "unallocated_at_peak_pct", "recuts", "recuts_per_placed")
        out[mode] = {}
        for key in keys:
            diffs = [float(a[key]) - float(b[key]) for a, b in zip(ours, theirs, strict=True)]
            out[mode][key] = [*_mean_sd(diffs), sum(d < 0 for d in diffs)]
    return out


def _workload(pool: MigPool, tasks: list[Any]) -> TargetWorkload:
    """FGD's target workload of the requests the tasks try first on this pool."""
    scheme = pool.scheme if pool.partitioned else None
    return TargetWorkload.from_requests(task_requests(t, scheme)[0] for t in tasks)


def _mean_sd(values: list[float]) -> list[float]:
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return [round(statistics.fmean(values), 2), round(sd, 2)]


def _rows(mix: str, runs: dict[tuple[str, str], list[Any]]) -> list[dict[str, Any]]:
    return [
        {
            "mix": mix,
            "partitioned": mode,
            "cut": cut,
            "unallocated_pct": _mean_sd([r.unallocated_pct for r in found]),
            "failed": _mean_sd([r.failed for r in found]),
            "recuts": _mean_sd([r.recuts for r in found]),
            "destroyed": _mean_sd([r.destroyed for r in found]),
            "seconds_per_run": round(statistics.fmean(r.seconds for r in found), 1),
        }
        for (mode, cut), found in runs.items()
    ]


def _isolation_price(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Per mix and cut policy: unallocated GPU with all cards partitioned / with shares only."""
    out: dict[str, float] = {}
    for row in rows:
        if row["partitioned"] != "all":
            continue
        shares = next(r for r in rows if r["mix"] == row["mix"] and r["partitioned"] == "none")
        base = shares["unallocated_pct"][0]
        if base > 0:
            out[f"{row['mix']} {row['cut']}"] = round(row["unallocated_pct"][0] / base, 2)
    return out


def _table(
    out: dict[str, Any],
    keys: tuple[str, ...] = ("unallocated_pct", "failed", "recuts", "destroyed"),
) -> None:
    print("| mix | partitioned | cut | " + " | ".join(keys) + " |")
    print("|---" * (len(keys) + 3) + "|")
    for row in out["rows"]:
        cells = " | ".join(f"{row[k][0]:g} ± {row[k][1]:g}" for k in keys)
        print(f"| {row['mix']} | {row['partitioned']} | {row['cut']} | {cells} |")
    print(f"price of isolation (all partitioned / shares): {out['isolation_price']}")
    print(f"HAMi: {out['hami']}")


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="one JSON line on stdout")
    parser.add_argument("--tasks", type=int, default=0, help="a seeded sample (quick run)")
    parser.add_argument("--seeds", type=int, default=10, help="seeds 42.. (default 10)")
    parser.add_argument("--policy", default="xpupool", help="the engine's placement policy")
    parser.add_argument("--timed", action="store_true", help="the timed replay with departures")
    parser.add_argument("--peak", type=float, default=1.3, help="--timed: peak demand/capacity")
    parser.add_argument(
        "--leave-out",
        default="",
        metavar="PROFILES",
        help="--timed: drop the fractional tasks asking these profiles (comma list)",
    )
    args = parser.parse_args(argv)
    if args.tasks < 0:
        parser.error("--tasks must be positive")
    if args.seeds < 1:
        parser.error("--seeds must be at least 1")
    if args.peak <= 0:
        parser.error("--peak must be positive")
    return args


if __name__ == "__main__":
    sys.exit(main())
