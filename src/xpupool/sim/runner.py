"""Run (policy, seed) replays of one trace, in parallel processes when asked, and summarise them.

Each run is independent: it reads the trace (cached per process), builds the tuned sequence for its
seed, replays it with the policy's engine profile and returns its binned curves. The summary is the
mean and sample standard deviation of unallocated GPU % at arrived = 100 %, with the authors' mean
beside it when their results for the trace are available.
"""

from __future__ import annotations

import functools
import statistics
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from xpupool.engine import Engine, Profile
from xpupool.engine.cycle.consolidate import ConsolidationRule
from xpupool.engine.cycle.defrag import DisruptionBudget
from xpupool.engine.fragmentation import TargetWorkload
from xpupool.model import Node
from xpupool.sim.alibaba import TraceTask, capacity_milli, read_nodes, read_tasks, to_request
from xpupool.sim.expected import paper_unallocated
from xpupool.sim.fgd_protocol import DEFAULT_TUNE, tuned_workload
from xpupool.sim.metrics import curves, unallocated_at
from xpupool.sim.progress import RunLabel, RunProgress, run_labels
from xpupool.sim.queue_config import QueueConfig
from xpupool.sim.replay import ReplayTrace, replay
from xpupool.sim.site_dispatch import SimSites


@dataclass(frozen=True, slots=True)
class RunSpec:
    """``policy`` is a built-in profile's name or a profile (from a profile file)."""

    nodes_path: str
    pods_path: str
    policy: Profile | str
    seed: int
    tune: float = DEFAULT_TUNE

    @property
    def policy_name(self) -> str:
        return self.policy if isinstance(self.policy, str) else self.policy.name


@functools.cache
def _load(nodes_path: str, pods_path: str) -> tuple[list[Node], list[TraceTask], TargetWorkload]:
    nodes = read_nodes(nodes_path)
    tasks = read_tasks(pods_path)
    workload = TargetWorkload.from_requests(to_request(t) for t in tasks)
    return nodes, tasks, workload


def run_one(spec: RunSpec, on_task: Callable[[int, int], None] | None = None) -> dict[str, object]:
    """One replay; the dict is the ``runs[]`` entry of ``xpupool simulate --json``.
    ``on_task(done, total)``: tasks placed so far (see ``replay``)."""
    nodes, tasks, workload = _load(spec.nodes_path, spec.pods_path)
    sequence = tuned_workload(tasks, capacity_milli(nodes), spec.seed, spec.tune)
    trace = replay(nodes, sequence, spec.policy, spec.seed, workload, on_task)
    series = curves(trace)
    return {
        "policy": spec.policy_name,
        "seed": spec.seed,
        "seconds": round(trace.seconds, 3),
        "tasks": len(sequence),
        "failed": trace.failed,
        "alloc_pct": _plain(series["alloc_pct"]),
        "frag_ratio_pct": _plain(series["frag_ratio_pct"]),
        "frag_amount_pct": _plain(series["frag_amount_pct"]),
        "unallocated_pct_at_100": round(unallocated_at(series["alloc_pct"]), 3),
        **_stranded(trace),
        "notes": list(trace.notes),
    }


@dataclass(frozen=True, slots=True)
class TimedOptions:
    """``peak``: compress arrivals to this peak demand (x capacity) instead of a fixed factor;
    ``checkpoints``: the seeded checkpoint model (``sim/checkpoints.py``); ``checkpoint_aware``:
    the planner weighs what victims lose; ``elastic_share``: that share of the multi-card tasks
    is elastic (``sim/elastic_tasks.py``; 0: none); ``history_half_life_s``: tenants are ordered
    by the share they held over a window decaying with this half-life
    (``engine/cycle/fair_share.py``, the server's ``--fair-share history``) instead of DRF on what
    they hold now (None); ``reservations``: that many windows of 8 whole cards each, for a
    tenth of the arrival window, evenly over it, each with one task booked into it, the cards lent
    until each begins (``sim/reservation_plan.py``; 0: none); ``defrag``: online
    defragmentation within that disruption budget (``engine/cycle/defrag.py``; None: off), for
    tasks asking ``defrag_min_cards`` cards or more; ``consolidate``: with ``defrag``, consolidation
    in quiet periods by that rule (``engine/cycle/consolidate.py``; None: off)."""

    peak: float | None = None
    checkpoints: bool = False
    checkpoint_aware: bool = False
    elastic_share: float = 0.0
    history_half_life_s: float | None = None
    reservations: int = 0
    defrag: DisruptionBudget | None = None
    defrag_min_cards: float = 4.0
    consolidate: ConsolidationRule | None = None


def run_timed(
    spec: RunSpec,
    order: str = "fifo",
    compress: float = 1.0,
    queues: QueueConfig | None = None,
    sites: SimSites | None = None,
    rule: str = "xpupool",
    options: TimedOptions | None = None,
) -> dict[str, object]:
    """One replay in time (arrivals, departures, queueing); the summary figures of the run, and
    with ``queues`` the mean wait per queue. With ``sites`` the nodes are split into them and each
    task is sent to one by ``rule`` (``site_dispatch.py``). Raises ValueError when
    ``options.peak`` is out of the trace's reach."""
    from xpupool.sim.checkpoints import CheckpointModel
    from xpupool.sim.elastic_tasks import ElasticTasks
    from xpupool.sim.load import compress_for_peak
    from xpupool.sim.reservation_plan import fixed_windows
    from xpupool.sim.site_dispatch import Dispatch
    from xpupool.sim.timed_replay import QueueOrder, timed_replay

    opts = options or TimedOptions()
    nodes, tasks, workload = _load(spec.nodes_path, spec.pods_path)
    dispatch: Callable[[Engine], Dispatch] | None = None
    if sites is not None:
        nodes = sites.split(nodes)
        data = sites.datasets_of(len(tasks), spec.seed)
        dispatch = functools.partial(
            Dispatch, sites=sites, rule=rule, workload=workload, seed=spec.seed, datasets=data
        )
    if opts.peak is not None:
        compress = compress_for_peak(tasks, capacity_milli(nodes), opts.peak)
    plan = None
    if opts.reservations:
        tasks, plan = fixed_windows(tasks, compress, nodes=nodes, count=opts.reservations)
    result = timed_replay(
        nodes,
        tasks,
        spec.policy,
        spec.seed,
        workload,
        QueueOrder(order),
        compress,
        queues,
        dispatch=dispatch,
        checkpoints=CheckpointModel(spec.seed) if opts.checkpoints else None,
        checkpoint_aware=opts.checkpoint_aware,
        elastic=ElasticTasks(opts.elastic_share, spec.seed) if opts.elastic_share else None,
        history_half_life_s=opts.history_half_life_s,
        reservations=plan,
        defrag=opts.defrag,
        defrag_min_cards=opts.defrag_min_cards,
        consolidate=opts.consolidate,
    )
    out: dict[str, object] = {"policy": spec.policy_name, "seed": spec.seed}
    if opts.history_half_life_s is not None:
        out["fair_share_half_life_s"] = opts.history_half_life_s
    if sites is not None:
        out["sites"] = rule
    out.update(result.summary())
    out["compress"] = round(compress, 1)
    if queues is not None:
        out["wait_by_queue"] = result.wait_by_queue()
    if plan is not None:
        arrive_at = [int(t.creation_time / compress) for t in tasks]
        delays = plan.start_delays_s(result.wait_s, arrive_at)
        out["reserved_start_delay_s"] = [round(d, 1) for d in delays]
    return out


def lower_bound(
    nodes_path: str, pods_path: str, seeds: list[int], tune: float = DEFAULT_TUNE
) -> float:
    """Mean over ``seeds`` of the packing bound on unallocated % at arrived = 100 %."""
    from xpupool.sim.packing_bound import arrived_until, unallocated_lower_bound

    nodes, tasks, _ = _load(nodes_path, pods_path)
    capacity = capacity_milli(nodes)
    bounds = [
        unallocated_lower_bound(
            arrived_until(tuned_workload(tasks, capacity, seed, tune), capacity), capacity // 1000
        )
        for seed in seeds
    ]
    return round(statistics.fmean(bounds), 3)


def _plain(values: Iterable[float]) -> list[float | None]:
    return [None if v != v else round(float(v), 3) for v in values]


def run_all(
    specs: list[RunSpec], jobs: int = 1, progress: RunProgress | None = None
) -> list[dict[str, object]]:
    """Every run, in ``specs`` order; ``jobs > 1`` spreads them over processes. ``progress``
    hears of each run (index into ``specs``) as it starts, places tasks and finishes; runs in
    other processes only as they finish."""
    results: dict[int, dict[str, object]] = {}
    if jobs <= 1:
        for i, spec in enumerate(specs):
            if progress:
                progress.started(i)
            on_task = functools.partial(progress.tasks, i) if progress else None
            results[i] = run_one(spec, on_task)
            if progress:
                progress.finished(i, results[i])
    else:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            futures = {pool.submit(run_one, spec): i for i, spec in enumerate(specs)}
            for future in as_completed(futures):
                results[futures[future]] = future.result()
                if progress:
                    progress.finished(futures[future], results[futures[future]])
    return [results[i] for i in range(len(specs))]


def _stranded(trace: ReplayTrace) -> dict[str, float | int]:
    """The ``stranded_*`` entries of a run: idle device compute (as % of GPU capacity and in
    thousandths) and memory (MiB) that no target shape could use at arrived = 100 %."""
    s = trace.stranded_at_100
    if s is None:
        return {}
    return {
        "stranded_gpu_pct_at_100": round(100.0 * s.total_core_milli / trace.capacity_milli, 3),
        "stranded_core_milli_at_100": s.total_core_milli,
        "stranded_memory_mib_at_100": s.total_memory_mib,
    }


def trace_name(pods_path: str) -> str:
    return Path(pods_path).stem


def spec_labels(specs: list[RunSpec]) -> list[RunLabel]:
    """How progress names each run."""
    return run_labels([(trace_name(s.pods_path), s.policy_name, s.seed) for s in specs])


def summarise(
    runs: list[dict[str, object]], trace: str, expected_dir: str | Path | None
) -> dict[str, dict[str, float | None]]:
    """Per policy: mean and sd of unallocated % at 100 %, and the authors' mean when known."""
    paper = paper_unallocated(expected_dir, trace) if expected_dir else {}
    by_policy: dict[str, list[float]] = {}
    stranded: dict[str, list[float]] = {}
    for run in runs:
        by_policy.setdefault(str(run["policy"]), []).append(float(run["unallocated_pct_at_100"]))  # type: ignore[arg-type]
        share = run.get("stranded_gpu_pct_at_100")
        if isinstance(share, int | float):
            stranded.setdefault(str(run["policy"]), []).append(float(share))
    return {
        policy: {
            "mean": round(statistics.fmean(values), 3),
            "sd": round(statistics.stdev(values), 3) if len(values) > 1 else 0.0,
            "paper_mean": round(paper[policy], 3) if policy in paper else None,
            "stranded_mean": round(statistics.fmean(stranded[policy]), 3)
            if stranded.get(policy)
            else None,
        }
        for policy, values in by_policy.items()
    }
