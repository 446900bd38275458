"""How loaded a timed replay is: peak demand, and the arrival compression that reaches a target.

A queueing figure taken where nothing waits shows nothing (issue 54: the default trace replayed as
recorded runs at 10 % utilisation with sub-second waits), so governance figures are taken where
demand peaks above capacity. Demand at a time is the GPU every task that has arrived and would
still run, had it started on arrival, asks for, over the pool's capacity; its peak rises as
arrivals are compressed but never above the whole trace's demand (every task at once), which for
the default Alibaba trace is 0.98 of its pool. :func:`tile` therefore lays several copies of a trace
over the same span (copy ``k`` shifted by ``k/copies`` of it), as more users with the same habits
would, and :func:`compress_for_peak` finds the compression that brings the peak to the target.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from xpupool.engine.fragmentation import TargetWorkload
from xpupool.model import Node
from xpupool.sim.alibaba import TraceTask, capacity_milli, to_request

HEADROOM = 1.25  # copies enough that the whole tiled demand is this much above the target peak


def peak_demand(tasks: Sequence[TraceTask], capacity_milli: int, compress: float = 1.0) -> float:
    """The highest demand over time (1.0 = the pool's capacity), arrivals divided by
    ``compress``, durations as recorded."""
    if not tasks or capacity_milli <= 0:
        return 0.0
    start = np.array([t.creation_time for t in tasks], np.float64) / compress
    end = start + np.array([t.duration_s for t in tasks], np.float64)
    gpu = np.array([t.gpu_request_milli for t in tasks], np.float64)
    times = np.concatenate([start, end])
    steps = np.concatenate([gpu, -gpu])
    order = np.lexsort((steps, times))  # at one instant, departures before arrivals
    return float(np.cumsum(steps[order]).max() / capacity_milli)


def compress_for_peak(
    tasks: Sequence[TraceTask], capacity_milli: int, target: float, *, at_most: float = 1e9
) -> float:
    """The compression (>= 1) whose peak demand is ``target`` (within 1 %), found by bisection
    on its logarithm (peak demand rises with compression). Raises ValueError when even
    ``at_most`` stays below the target: the trace is too small for that load; :func:`tile` it."""
    if peak_demand(tasks, capacity_milli, 1.0) >= target:
        return 1.0
    if peak_demand(tasks, capacity_milli, at_most) < target:
        whole = peak_demand(tasks, capacity_milli, at_most)
        raise ValueError(f"peak demand reaches only {whole:.2f} of capacity; tile the trace")
    low, high = 0.0, float(np.log(at_most))
    for _ in range(60):
        middle = (low + high) / 2
        peak = peak_demand(tasks, capacity_milli, float(np.exp(middle)))
        if abs(peak - target) <= 0.01 * target:
            return float(np.exp(middle))
        low, high = (middle, high) if peak < target else (low, middle)
    return float(np.exp(high))


def tile(tasks: Sequence[TraceTask], copies: int) -> list[TraceTask]:
    """``copies`` copies of ``tasks`` over the same span, copy ``k`` arriving ``k/copies`` of the
    span later (wrapped round to the start), its names suffixed ``#k``. Copy 0 is ``tasks``."""
    if copies < 1:
        raise ValueError("copies must be at least 1")
    if not tasks:
        return []
    first = min(t.creation_time for t in tasks)
    span = max(t.creation_time for t in tasks) - first + 1
    out = list(tasks)
    for k in range(1, copies):
        shift = span * k // copies
        for t in tasks:
            at = first + (t.creation_time - first + shift) % span
            moved = at - t.creation_time
            out.append(
                replace(
                    t,
                    name=f"{t.name}#{k}",
                    creation_time=at,
                    deletion_time=t.deletion_time + moved,
                    scheduled_time=None if t.scheduled_time is None else t.scheduled_time + moved,
                )
            )
    return out


@dataclass(frozen=True, slots=True)
class PeakLoad:
    """A trace made to peak at a target demand: its nodes, its tiled tasks (``copies`` of the
    trace), the compression of their arrivals and the target workload of the untiled tasks."""

    nodes: list[Node]
    tasks: list[TraceTask]
    copies: int
    compress: float
    capacity_milli: int
    workload: TargetWorkload

    def describe(self) -> dict[str, float | int]:
        """What a benchmark prints of its load."""
        return {
            "nodes": len(self.nodes),
            "gpus": self.capacity_milli // 1000,
            "tasks": len(self.tasks),
            "copies": self.copies,
            "compress": round(self.compress, 1),
            "peak_demand": round(peak_demand(self.tasks, self.capacity_milli, self.compress), 3),
        }


def sampled(
    nodes: Sequence[Node], tasks: Sequence[TraceTask], sample: int, seed: int
) -> tuple[list[Node], list[TraceTask]]:
    """A seeded sample of ``sample`` tasks on a proportional seeded sample of the nodes (a smoke
    test or a quick run of a benchmark); all of both when ``sample`` is 0 or not below the
    number of tasks."""
    nodes, tasks = list(nodes), list(tasks)
    if sample and sample < len(tasks):
        rng = random.Random(seed)
        share = sample / len(tasks)
        nodes = rng.sample(nodes, max(1, math.ceil(share * len(nodes))))
        tasks = rng.sample(tasks, sample)
    return nodes, tasks


def peak_load(
    nodes: Sequence[Node],
    tasks: Sequence[TraceTask],
    peak: float,
    *,
    sample: int = 0,
    seed: int = 42,
) -> PeakLoad:
    """``tasks`` on ``nodes`` tiled (:func:`tile`, the fewest copies whose whole demand is
    :data:`HEADROOM` x ``peak``) and compressed until peak demand is ``peak`` x capacity, as the
    queueing benchmarks replay it. ``sample`` > 0: a seeded sample of that many tasks on a
    proportional seeded sample of the nodes (a smoke test)."""
    nodes, tasks = sampled(nodes, tasks, sample, seed)
    workload = TargetWorkload.from_requests(to_request(t) for t in tasks)
    capacity = capacity_milli(nodes)
    whole = peak_demand(tasks, capacity, 1e12)
    copies = max(1, math.ceil(HEADROOM * peak / whole)) if whole else 1
    tiled = tile(tasks, copies)
    return PeakLoad(
        nodes, tiled, copies, compress_for_peak(tiled, capacity, peak), capacity, workload
    )


def default_trace_at_peak(peak: float, *, sample: int = 0, seed: int = 42) -> PeakLoad:
    """:func:`peak_load` of the Alibaba default trace on its GPU node list (:func:`default_trace`)."""
    nodes, tasks = default_trace()
    return peak_load(nodes, tasks, peak, sample=sample, seed=seed)


def default_trace() -> tuple[list[Node], list[TraceTask]]:
    """The Alibaba default trace's GPU node list and tasks (found as ``xpupool simulate`` finds
    them: ``sim/trace_files.py``)."""
    from xpupool.sim.alibaba import read_nodes, read_tasks
    from xpupool.sim.trace_files import DEFAULT_PODS, default_nodes

    nodes_path = default_nodes()
    return read_nodes(str(nodes_path)), read_tasks(str(nodes_path.parent / DEFAULT_PODS))
