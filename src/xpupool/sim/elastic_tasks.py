"""Elastic tasks in the timed replay (issue 54 part 1): which trace tasks are elastic, and how long
one runs when its size changes while it runs.

The traces record fixed sizes, so the replay makes a seeded ``share`` of the tasks that ask two
or more whole cards elastic: a task of ``G`` cards becomes replicas of one card each (its CPU and
memory split evenly), ``replicas=ceil(G/2)..G``, its minimum placed as a gang. Its work is what it
did in the trace, ``G x duration`` card-seconds, and it runs at a rate equal to the replicas it
holds (linear scaling: a data-parallel job whose step time its per-replica batch sets), so at its
full size it takes exactly its recorded time and at its minimum twice that. A resize at ``now``
banks what was done at the old rate and moves its end. A preempted elastic task keeps the part of
this run's work its last checkpoint saved (the same share of the run as a fixed task's).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from xpupool.model import Request
from xpupool.model.request_model import request_from_dict
from xpupool.sim.alibaba import GPU_MILLI, TraceTask

CARD_MILLI = GPU_MILLI  # one elastic replica holds one whole card


@dataclass(slots=True)
class _Run:
    work_s: float  # card-seconds of work in all (G x recorded duration)
    done_s: float = 0.0  # card-seconds done and kept (by earlier runs' checkpoints)
    run_done_s: float = 0.0  # card-seconds done in the current run so far
    since: int = 0  # when the current rate began
    rate: int = 0  # replicas held now (0: not running)


@dataclass(slots=True)
class ElasticTasks:
    """The elastic tasks of one replay: ``share`` (0..1) of the multi-card whole-card tasks,
    drawn from ``seed``."""

    share: float
    seed: int = 0
    _runs: dict[int, _Run] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 0.0 <= self.share <= 1.0:
            raise ValueError("elastic share must be within 0..1")

    def choose(self, tasks: list[TraceTask] | tuple[TraceTask, ...]) -> set[int]:
        """Which of ``tasks`` (indices) are elastic: the same for a given seed and trace."""
        rng = np.random.default_rng(self.seed)
        draws = rng.random(len(tasks))
        chosen = {
            i
            for i, t in enumerate(tasks)
            if t.num_gpu >= 2 and t.gpu_milli >= GPU_MILLI and draws[i] < self.share
        }
        for i in chosen:
            self._runs[i] = _Run(float(tasks[i].num_gpu * tasks[i].duration_s))
        return chosen

    def __contains__(self, task: int) -> bool:
        return task in self._runs

    @staticmethod
    def request(task: TraceTask, base: Request) -> Request:
        """``base`` (the task's fixed request) as replicas of one card, half of them at least."""
        g = task.num_gpu
        one = request_from_dict(
            {
                "cpu": f"{task.cpu_milli // g}m",
                "memory": task.memory_mib // g,
                "devices": {"count": 1, "models": list(task.gpu_spec)},
            }
        )
        return replace(
            one,
            name=base.name,
            replicas=math.ceil(g / 2),
            max_replicas=g,
            gang=True,  # its minimum all or none, as the server admits it
            priority=base.priority,
        )

    def resized(self, task: int, now: int, replicas: int) -> int:
        """Run ``task`` on ``replicas`` from ``now`` (0: it stopped); returns its end time."""
        run = self._runs[task]
        run.run_done_s += run.rate * (now - run.since)
        run.since, run.rate = now, replicas
        if not replicas:
            return now
        left = max(run.work_s - run.done_s - run.run_done_s, 0.0)
        return now + math.ceil(left / replicas)

    def stopped(self, task: int, now: int, kept: float) -> float:
        """``task`` was preempted at ``now``, keeping ``kept`` (0..1) of this run's work; returns
        the card-seconds it lost."""
        self.resized(task, now, 0)
        run = self._runs[task]
        lost = run.run_done_s * (1.0 - kept)
        run.done_s += run.run_done_s - lost
        run.run_done_s = 0.0
        return lost
