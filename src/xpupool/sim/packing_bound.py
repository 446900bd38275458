"""How well could *any* policy have done? A lower bound on unallocated GPU % at an arrived level.

Relax the cluster to a bag of identical whole GPUs (no nodes, CPU, memory, models or arrival order)
and pack the GPU demand that arrived so far as well as possible: a cutting-stock linear program over
packing patterns (multisets of share sizes that fit one GPU). Whole-GPU tasks are one GPU per GPU
they ask. The LP optimum is at least what an exact packing places, which is at least what any
online policy on the real cluster places, so ``demand - LP optimum`` bounds unallocated from below.
A policy's distance to this bound says how much room is left, which a comparison between policies
cannot say.

Needs SciPy (HiGHS). Patterns are enumerated; traces with many tiny share sizes could have too many,
in which case :class:`BoundUnavailableError` says so rather than returning a weaker number silently.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

import numpy as np

from xpupool.sim.alibaba import GPU_MILLI, TraceTask

MAX_PATTERNS = 200_000


class BoundUnavailableError(RuntimeError):
    """The bound cannot be computed here (SciPy missing, or too many packing patterns)."""


def packing_patterns(sizes: list[int]) -> list[tuple[int, ...]]:
    """Every non-empty multiset of ``sizes`` (counts per size) that fits in one GPU."""
    out: list[tuple[int, ...]] = []
    counts: list[int] = []

    def walk(i: int, room: int) -> None:
        if len(out) > MAX_PATTERNS:
            raise BoundUnavailableError(f"more than {MAX_PATTERNS} packing patterns")
        if i == len(sizes):
            if any(counts):
                out.append(tuple(counts))
            return
        for k in range(room // sizes[i] + 1):
            counts.append(k)
            walk(i + 1, room - k * sizes[i])
            counts.pop()

    walk(0, GPU_MILLI)
    return out


def arrived_until(tasks: Iterable[TraceTask], limit_milli: float) -> list[TraceTask]:
    """The prefix of ``tasks`` whose cumulative GPU demand stays within ``limit_milli``."""
    out, total = [], 0
    for task in tasks:
        total += task.gpu_request_milli
        if total > limit_milli:
            break
        out.append(task)
    return out


def unallocated_lower_bound(tasks: Iterable[TraceTask], gpus: int) -> float:
    """Least unallocated GPU demand, in % of ``gpus`` GPUs, after ``tasks`` arrive on any policy."""
    try:
        from scipy.optimize import linprog
    except ImportError as exc:  # pragma: no cover - scipy is a declared dependency
        raise BoundUnavailableError("the packing bound needs SciPy") from exc
    items: Counter[int] = Counter()
    for task in tasks:
        if task.num_gpu == 0:
            continue
        if task.gpu_milli >= GPU_MILLI:
            items[GPU_MILLI] += task.num_gpu
        else:
            items[task.gpu_milli] += 1
    if not items:
        return 0.0
    sizes = sorted(items, reverse=True)
    patterns = packing_patterns(sizes)
    use = np.asarray(patterns, np.float64).T  # [sizes, patterns]
    value = np.asarray(sizes, np.float64) @ use
    a_ub = np.vstack([use, np.ones(len(patterns))])
    b_ub = np.asarray([items[s] for s in sizes] + [gpus], np.float64)
    result = linprog(-value, A_ub=a_ub, b_ub=b_ub, bounds=(0, None), method="highs")
    if not result.success:
        raise BoundUnavailableError(f"LP solver failed: {result.message}")
    demand = float(sum(items[s] * s for s in sizes))
    placed = -float(result.fun)
    return max(0.0, 100.0 * (demand - placed) / (gpus * GPU_MILLI))
