"""The FGD paper's workload protocol: per seed, shuffle the trace and tune it to 130 % of capacity.

Follows the authors' simulator (docs/research/fgd-simulator.md section 3): tasks sorted by name and
shuffled; when the trace asks for less than the target, tasks drawn uniformly with replacement from
the name-sorted trace are appended until the next one would cross it, compared, as the authors'
code does, by that task's per-GPU share rather than its full demand; when it asks for more, random
tasks are dropped until it fits. Our generator is NumPy's, not Go's: the protocol is the same, the
stream is not, which moves a ten-seed mean by about 0.1 point.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from xpupool.sim.alibaba import TraceTask

DEFAULT_TUNE = 1.3


def tuned_workload(
    tasks: Sequence[TraceTask], capacity_milli: int, seed: int, tune: float = DEFAULT_TUNE
) -> list[TraceTask]:
    """The task sequence one replay of ``seed`` sees: shuffled, then grown or shrunk to ``tune``."""
    rng = np.random.default_rng(seed)
    by_name = sorted(tasks, key=lambda t: t.name)
    order = [by_name[i] for i in rng.permutation(len(by_name))]
    target = tune * capacity_milli
    total = sum(t.gpu_request_milli for t in order)
    if total < target:
        while True:
            task = by_name[int(rng.integers(len(by_name)))]
            if total + task.gpu_milli > target:
                break
            order.append(task)
            total += task.gpu_request_milli
    else:
        while total > target and order:
            task = order.pop(int(rng.integers(len(order))))
            total -= task.gpu_request_milli
    return order
