"""FGD: place where the target workload's expected fragmentation grows least (Weng et al., ATC'23).

For each fitting node the scorer evaluates every way the replica could land there (each fitting
device for a one-device replica; the first k fitting devices for k devices), computes the node's
fragmentation after it (``engine/fragmentation/measure.py``) and keeps the best. The node score
is the paper's ``floor(100 * sigmoid((F_before - F_after) / 1000))``: an integer, so ties are
common and go to the engine's seeded node order. The device kept is the lowest column with the best
score.

Cost: the fragmentation after placement is cached per request amounts and recomputed only for
nodes whose version moved (``engine/fragmentation/after.py``).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from xpupool.engine.context import Context
from xpupool.engine.fragmentation.after import AfterPlacement
from xpupool.engine.fragmentation.cache import FragmentationCache
from xpupool.engine.fragmentation.measure import TargetWorkload
from xpupool.engine.scorers.base import ScorerEnv
from xpupool.engine.state import FloatArray, IntArray
from xpupool.engine.topology import device_groups
from xpupool.model.request import Topology


class Fgd:
    name: ClassVar[str] = "fgd"

    def __init__(
        self, env: ScorerEnv, workload: TargetWorkload | None = None, capped: bool = False
    ) -> None:
        workload = workload or env.workload
        if workload is None:
            raise ValueError("the fgd scorer needs a target workload (Engine(..., workload=...))")
        self.frag = FragmentationCache(env.pipeline.state, env.pipeline, workload, capped)
        self.after = AfterPlacement(self.frag)
        self._columns: tuple[Context, IntArray] | None = None

    def score(self, ctx: Context) -> FloatArray:
        state = ctx.state
        seen = self.after.evaluate(ctx)
        before, cached, candidates = seen.before, seen.after, seen.candidates
        if cached.frag_after.ndim == 1:
            return fgd_score(before, cached.frag_after)
        # One device: best fitting device per candidate node, lowest column on equal scores.
        assert ctx.dev_fit is not None
        scores = np.zeros(state.n_nodes, np.float64)
        columns = np.full(state.n_nodes, -1, np.int64)
        if candidates.size:
            per_device = fgd_score(before[candidates, None], cached.frag_after[candidates])
            per_device = np.where(ctx.dev_fit[candidates], per_device, -np.inf)
            best = np.argmax(per_device, axis=1)
            columns[candidates] = best
            scores[candidates] = per_device[np.arange(candidates.size), best]
        self._columns = (ctx, columns)
        return scores

    def pick(self, ctx: Context, node: int) -> list[int] | None:
        if ctx.k == 1:
            if self._columns is None or self._columns[0] is not ctx:
                self.score(ctx)  # the engine skips scoring when one node fits; the device matters
            assert self._columns is not None
            return [int(self._columns[1][node])]
        return first_fitting(ctx, node)


def first_fitting(ctx: Context, node: int) -> list[int] | None:
    """The first ``k`` fitting cards of ``node`` for a replica of several cards (where FGD's
    measure places them), None for others. Under a topology constraint, the first ``k`` of the
    first group (link group, NUMA node) that has ``k`` fitting: the filter made sure one has, and
    the constraint is the request's, whatever the measure assumed."""
    if ctx.k <= 1 or ctx.dev_fit is None:
        return None
    columns = np.flatnonzero(ctx.dev_fit[node])
    topology = ctx.req.devices.topology
    if topology is Topology.NONE:
        return [int(c) for c in columns[: ctx.k]]
    groups = device_groups(ctx.state, topology)[node][columns]
    for group in dict.fromkeys(groups.tolist()):
        members = columns[groups == group]
        if group >= 0 and members.size >= ctx.k:
            return [int(c) for c in members[: ctx.k]]
    return None


def fgd_score(before: FloatArray, after: FloatArray) -> FloatArray:
    """``floor(100 * sigmoid((before - after) / 1000))``: 50 means no change, in 0..99."""
    delta = np.clip((before - after) / 1000.0, -50.0, 50.0)
    result: FloatArray = np.floor(100.0 / (1.0 + np.exp(-delta)))
    return result
