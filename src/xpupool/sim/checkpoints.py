"""When each task of a timed replay checkpoints: the model behind GPU-hours lost to preemption.

The traces record no checkpoints, so the replay draws, once per task and from ``seed``, how often
it saves its progress: with probability ``never_share`` never (it loses its whole run when
preempted, as every task did before this model), else every ``N`` minutes of run time, ``N``
log-uniform between ``min_interval_min`` and ``max_interval_min`` (training jobs save every few
minutes to every couple of hours; log-uniform gives each decade the same weight). A preempted task
keeps what it saved by its last checkpoint and runs the rest when placed again; the work since is
lost, ``cards x (now - last checkpoint)``. Every checkpoint is reported, so the planner knows
them as a server would from the jobs' reports.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

NEVER = math.inf


@dataclass(frozen=True, slots=True)
class CheckpointModel:
    """See the module docstring; the defaults are the ones docs/simulator.md states."""

    seed: int = 0
    never_share: float = 0.25
    min_interval_min: float = 5.0
    max_interval_min: float = 120.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.never_share <= 1.0:
            raise ValueError("never_share must be within 0..1")
        if not 0.0 < self.min_interval_min <= self.max_interval_min:
            raise ValueError("need 0 < min_interval_min <= max_interval_min")

    def intervals_s(self, n: int) -> np.ndarray:
        """Seconds between checkpoints for ``n`` tasks, in task order (:data:`NEVER`: none);
        the same for a given seed and ``n``."""
        rng = np.random.default_rng(self.seed)
        never = rng.random(n) < self.never_share
        low, high = math.log(self.min_interval_min), math.log(self.max_interval_min)
        every = np.exp(rng.uniform(low, high, n)) * 60.0
        return np.where(never, NEVER, every)


def saved_s(ran_s: float, interval_s: float) -> float:
    """Run time saved by the last checkpoint of a run that lasted ``ran_s``."""
    if not math.isfinite(interval_s) or ran_s <= 0:
        return 0.0
    return math.floor(ran_s / interval_s) * interval_s
