"""Replay a task sequence through the engine, one task at a time, with no departures (FGD protocol).

Each task goes to :meth:`Engine.place` exactly as a server request would; the simulator only keeps
score: GPU demand that arrived, GPU demand that was placed, the cluster's fragmentation against
the target workload after every task, and the capacity stranded for that workload
(``stranded_capacity``) when the arrived demand first reaches the cluster's capacity. A task that
fits nowhere fails, is not retried, and still counts as arrived.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from xpupool.engine import ClusterState, Engine, Profile
from xpupool.engine.fragmentation import (
    Stranded,
    TargetWorkload,
    kernels,
    stranded_capacity,
)
from xpupool.engine.state import FloatArray, IntArray
from xpupool.model import Node
from xpupool.sim.alibaba import TraceTask, capacity_milli, to_request
from xpupool.sim.progress import TASK_STEP


@dataclass(frozen=True, slots=True)
class ReplayTrace:
    """Per-task series, all of length ``len(tasks)``, in thousandths of a GPU."""

    arrived_milli: IntArray  # cumulative GPU demand that arrived, this task included
    placed_milli: IntArray  # cumulative GPU demand placed
    frag_milli: FloatArray  # cluster fragmentation after the task
    idle_milli: IntArray  # cluster idle GPU after the task
    capacity_milli: int
    failed: int
    seconds: float
    notes: tuple[str, ...] = ()  # what the policy chose for itself (``Engine.notes``)
    # Idle device capacity no target shape can use, when arrived demand first reached capacity
    # (after the last task if it never did).
    stranded_at_100: Stranded | None = None


def replay(
    nodes: Sequence[Node],
    tasks: Sequence[TraceTask],
    policy: Profile | str,
    seed: int,
    workload: TargetWorkload,
    on_task: Callable[[int, int], None] | None = None,
) -> ReplayTrace:
    """Place ``tasks`` in order with ``policy`` (an engine profile, or a built-in's name) and
    record the series. ``on_task(done, total)`` is told every ``TASK_STEP`` tasks and at the end
    (progress for a person; it sees nothing of the placements)."""
    kernels.warm()  # once per process: not part of this replay's seconds
    start = time.perf_counter()
    state = ClusterState(nodes, seed=seed)
    engine = Engine(state, policy, seed=seed, workload=workload)
    frag = engine.fragmentation_cache(workload)
    n = len(tasks)
    arrived = np.zeros(n, np.int64)
    placed = np.zeros(n, np.int64)
    frag_series = np.zeros(n, np.float64)
    idle = np.zeros(n, np.int64)
    total_arrived = total_placed = failed = 0
    capacity = capacity_milli(nodes)
    idle_now = capacity
    stranded: Stranded | None = None
    for i, task in enumerate(tasks):
        total_arrived += task.gpu_request_milli
        if engine.place(to_request(task)).ok:
            total_placed += task.gpu_request_milli
            idle_now -= task.gpu_request_milli
        else:
            failed += 1
        arrived[i], placed[i], idle[i] = total_arrived, total_placed, idle_now
        frag_series[i] = frag.current().sum()
        if stranded is None and total_arrived >= capacity:
            stranded = stranded_capacity(state, frag.table)
        if on_task is not None and ((i + 1) % TASK_STEP == 0 or i + 1 == n):
            on_task(i + 1, n)
    if stranded is None:
        stranded = stranded_capacity(state, frag.table)
    return ReplayTrace(
        arrived,
        placed,
        frag_series,
        idle,
        capacity,
        failed,
        time.perf_counter() - start,
        tuple(engine.notes()),
        stranded,
    )
