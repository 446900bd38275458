"""Replay a trace in time: tasks arrive at their creation time, run for their recorded duration once
placed, and wait in a queue while nothing fits.

The engine is the same one as everywhere else; this loop only decides *when* to ask it. After every
arrival or departure the queue is retried in order (FIFO by arrival, or by priority then arrival).
Within one pass, once a task shape fails, later tasks of the same shape are skipped: capacity only
shrinks during a pass, so they would fail too. A task's duration is ``deletion - scheduled`` from the
trace (``deletion - creation`` when it was never scheduled there), see ``TraceTask.duration_s``.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from xpupool.engine import ClusterState, Engine, Profile
from xpupool.engine.fragmentation import TargetWorkload, kernels
from xpupool.model import Node, Request
from xpupool.sim.alibaba import TraceTask, capacity_milli, to_request

# Alibaba QoS classes, most important first (latency-sensitive, burstable, best effort).
QOS_PRIORITY: dict[str, int] = {"LS": 2, "Burstable": 1, "BE": 0}


class QueueOrder(StrEnum):
    FIFO = "fifo"
    PRIORITY = "priority"


@dataclass(frozen=True, slots=True)
class TimedResult:
    """Per task: wait (s) and completion time (s), NaN when never placed; utilisation as a step
    function over event times (GPU % allocated from ``times[i]`` until ``times[i + 1]``).
    ``last_arrival`` ends the window the mean utilisation is taken over: after it only the long
    tail of the longest tasks remains, which says nothing about the policy."""

    policy: str
    wait_s: np.ndarray
    jct_s: np.ndarray
    times: np.ndarray
    util_pct: np.ndarray
    last_arrival: float
    seconds: float

    def summary(self) -> dict[str, float]:
        placed = ~np.isnan(self.wait_s)
        ends = np.minimum(np.append(self.times[1:], self.last_arrival), self.last_arrival)
        spans = np.clip(ends - self.times, 0.0, None)
        mean_util = float((self.util_pct * spans).sum() / spans.sum()) if spans.sum() else 0.0
        waits = self.wait_s[placed]
        return {
            "tasks": float(self.wait_s.size),
            "never_placed": float((~placed).sum()),
            "mean_util_pct": round(mean_util, 3),
            "peak_util_pct": round(float(self.util_pct.max(initial=0.0)), 3),
            "mean_wait_s": round(float(waits.mean()), 1) if waits.size else 0.0,
            "p95_wait_s": round(float(np.percentile(waits, 95)), 1) if waits.size else 0.0,
            "mean_jct_s": round(float(self.jct_s[placed].mean()), 1) if waits.size else 0.0,
            "seconds": round(self.seconds, 3),
        }


def timed_replay(
    nodes: Sequence[Node],
    tasks: Sequence[TraceTask],
    policy: Profile | str,
    seed: int,
    workload: TargetWorkload,
    order: QueueOrder = QueueOrder.FIFO,
    compress: float = 1.0,
) -> TimedResult:
    """Run ``tasks`` by their trace times under ``policy``; see the module docstring.

    ``compress`` > 1 brings arrivals closer together (times divided by it) while durations stay
    as recorded: the trace is a sample, so this is how to ask "what if the load were N times higher".
    """
    if compress <= 0:
        raise ValueError("compress must be positive")
    arrive_at = [int(t.creation_time / compress) for t in tasks]
    kernels.warm()  # once per process: not part of this replay's seconds
    started = time.perf_counter()
    engine = Engine(ClusterState(nodes, seed=seed), policy, seed=seed, workload=workload)
    capacity = capacity_milli(nodes)
    requests: list[Request] = [to_request(t) for t in tasks]
    shapes = [(r.cpu_milli, r.memory_mib, r.devices) for r in requests]
    wait = np.full(len(tasks), np.nan)
    jct = np.full(len(tasks), np.nan)
    arrivals = sorted(range(len(tasks)), key=lambda i: (arrive_at[i], i))
    departures: list[tuple[int, int, int]] = []  # (time, task index, allocation id)
    pending: list[tuple[int, int, int]] = []  # heap of (-priority or 0, arrival rank, task index)
    used = 0
    times: list[float] = []
    util: list[float] = []
    next_arrival = 0

    def try_pending(now: int) -> None:
        nonlocal used
        failed_shapes: set[object] = set()
        kept: list[tuple[int, int, int]] = []
        while pending:
            entry = heapq.heappop(pending)
            i = entry[2]
            if shapes[i] in failed_shapes:
                kept.append(entry)
                continue
            placement = engine.place(requests[i])
            if not placement.ok:
                failed_shapes.add(shapes[i])
                kept.append(entry)
                continue
            wait[i] = now - arrive_at[i]
            jct[i] = wait[i] + tasks[i].duration_s
            alloc = placement.allocations[0]
            used += tasks[i].gpu_request_milli
            heapq.heappush(departures, (now + tasks[i].duration_s, i, alloc.id))
        for entry in kept:
            heapq.heappush(pending, entry)

    while next_arrival < len(arrivals) or departures:
        arrival_time = arrive_at[arrivals[next_arrival]] if next_arrival < len(arrivals) else None
        if departures and (arrival_time is None or departures[0][0] <= arrival_time):
            now = departures[0][0]
            while departures and departures[0][0] == now:
                _, i, alloc_id = heapq.heappop(departures)
                engine.release(alloc_id)
                used -= tasks[i].gpu_request_milli
        else:
            assert arrival_time is not None
            now = arrival_time
            while next_arrival < len(arrivals) and arrive_at[arrivals[next_arrival]] == now:
                i = arrivals[next_arrival]
                rank = -QOS_PRIORITY.get(tasks[i].qos, 0) if order is QueueOrder.PRIORITY else 0
                heapq.heappush(pending, (rank, next_arrival, i))
                next_arrival += 1
        try_pending(now)
        times.append(float(now))
        util.append(100.0 * used / capacity if capacity else 0.0)
    last_arrival = float(max(arrive_at, default=0))
    return TimedResult(
        policy if isinstance(policy, str) else policy.name,
        wait,
        jct,
        np.asarray(times),
        np.asarray(util),
        last_arrival,
        time.perf_counter() - started,
    )
