"""What a timed replay asks of a workload whose run times depend on the card a task gets.

A recorded trace (Alibaba's) gives each task's duration; a trace of training jobs (Gavel's) gives
their work (steps) and their speed per card model, so the run time is known only once the task is
placed. The replay asks such a workload for each task's request (with its speeds, for the
throughput policy) and, at placement, for its duration on the cards it got.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from xpupool.model import Allocation, Request
from xpupool.sim.alibaba import TraceTask


class TaskSpeeds(Protocol):
    def request(self, index: int, task: TraceTask) -> Request:
        """The engine request for ``tasks[index]`` (its speeds included)."""
        ...

    def duration_s(self, index: int, allocations: Sequence[Allocation]) -> int:
        """Seconds ``tasks[index]`` runs on the devices of ``allocations``."""
        ...
