"""Reservations for the timed replay: windows at fixed times and the tasks submitted into them.

The replay makes each reservation before its first arrival and drives the cycle's reservation
book (``engine/cycle/reservations.py``) by its clock. :func:`fixed_windows` lays ``count``
windows evenly over the trace's arrival window, each holding one large shape (whole cards on one
node) for a tenth of that window by default, and adds one task per window, submitted into it a
sixth of its length before it begins and running for most of it, as a key job booked ahead would.
Windows sized on the arrival window keep what they cost inside the span utilisation is measured
over (``TimedResult.summary``: until the last arrival). A trace task's declared run time is its recorded
duration (the trace knows it); which tasks are preemptible, so may borrow reserved cards before a
window whatever their run time, is ``borrow_below``: those of lower priority (every task when None).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from xpupool.engine.cycle.reservations import Reservation
from xpupool.model import Node
from xpupool.sim.alibaba import GPU_MILLI, TraceTask, to_request


@dataclass(frozen=True, slots=True)
class ReservationPlan:
    """``reservations`` (times in replay seconds), the tasks submitted into each (task index ->
    reservation name), whether reserved cards are lent before their window (False: held idle,
    Slurm's way) and the priority below which a task is preemptible (None: every task)."""

    reservations: tuple[Reservation, ...]
    members: Mapping[int, str]
    lend: bool = True
    borrow_below: int | None = None

    def start_delays_s(self, wait_s: np.ndarray, arrive_at: Sequence[int]) -> list[float]:
        """Per reserved task, in task order: how long after its window began it started (0: on
        time; NaN: never placed)."""
        start_of = {r.name: r.start_s for r in self.reservations}
        return [
            float(arrive_at[i] + wait_s[i] - start_of[name])
            for i, name in sorted(self.members.items())
        ]


def fixed_windows(
    tasks: Sequence[TraceTask],
    compress: float,
    *,
    nodes: Sequence[Node] = (),
    count: int,
    cards: int = 8,
    window_s: int | None = None,
    run_share: float = 0.75,
    lend: bool = True,
    borrow_below: int | None = None,
) -> tuple[list[TraceTask], ReservationPlan]:
    """``tasks`` with one reserved task per window appended, and the plan of ``count`` windows
    of ``window_s`` replay seconds (None: a tenth of the arrival window), each holding ``cards``
    whole cards (on one node), starting at ``(k + 1) / (count + 1)`` of the arrival window; each
    reserved task arrives a sixth of ``window_s`` before its window and runs ``run_share`` of it.
    With ``nodes``, ``cards`` is at most the most cards one of them has, so that a sampled pool
    can still hold it. Raises ValueError for a count below 1 or a share outside (0, 1]."""
    if count < 1:
        raise ValueError("count must be at least 1")
    if not 0 < run_share <= 1:
        raise ValueError("run_share must be in (0, 1]")
    if nodes:
        cards = min(cards, max(len(n.devices) for n in nodes))
    arrivals = [t.creation_time / compress for t in tasks]
    first, last = min(arrivals, default=0.0), max(arrivals, default=0.0)
    if window_s is None:
        window_s = max(60, int((last - first) / 10))
    lead_s = window_s // 6
    out = list(tasks)
    reservations: list[Reservation] = []
    members: dict[int, str] = {}
    for k in range(count):
        start = int(first + (last - first) * (k + 1) / (count + 1))
        name = f"reserved-{k}"
        created = int(max(0, start - lead_s) * compress)
        task = TraceTask(
            name=name,
            cpu_milli=8000,
            memory_mib=32 * 1024,
            num_gpu=cards,
            gpu_milli=GPU_MILLI,
            gpu_spec=(),
            creation_time=created,
            deletion_time=created + int(window_s * run_share),
            scheduled_time=created,
            qos="LS",
        )
        members[len(out)] = name
        out.append(task)
        reservations.append(Reservation(name, name, to_request(task), start, start + window_s))
    return out, ReservationPlan(tuple(reservations), members, lend, borrow_below)
