"""FGD: place where the target workload's expected fragmentation grows least (Weng et al., ATC'23).

For each fitting node the scorer evaluates every way the replica could land there (each fitting
device for a one-device share; the first k fitting devices for k whole devices), computes the node's
fragmentation after it (``engine/fragmentation.py``) and keeps the best. The node score is the
paper's ``floor(100 * sigmoid((F_before - F_after) / 1000))``: an integer, so ties are common and go
to the engine's seeded node order.

Cost: the best choice per node depends only on that node's state and the replica's shape, so it is
cached per shape and recomputed only for nodes whose version moved since. A replay recomputes a
handful of nodes per task instead of the whole cluster.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from xpupool.engine.context import Context
from xpupool.engine.fragmentation import (
    FragmentationCache,
    IndexArray,
    NodeView,
    ShapeTable,
    TargetWorkload,
    node_view,
    shape_fits,
)
from xpupool.engine.scorers.base import ScorerEnv
from xpupool.engine.state import BoolArray, ClusterState, FloatArray, IntArray

_NO_CHOICE = np.iinfo(np.int64).max


@dataclass(slots=True)
class _Choices:
    """Per node, for one replica shape: best fragmentation after placement and where."""

    frag_after: FloatArray  # [N]
    column: IntArray  # [N] device column of the best one-device choice, -1 otherwise
    version: IntArray  # [N] node_version these were computed at; -1 = never


class Fgd:
    name: ClassVar[str] = "fgd"

    def __init__(self, env: ScorerEnv) -> None:
        if env.workload is None:
            raise ValueError("the fgd scorer needs a target workload (Engine(..., workload=...))")
        self.workload: TargetWorkload = env.workload
        self.pipeline = env.pipeline
        self.frag = FragmentationCache(env.pipeline.state, env.pipeline, env.workload)
        self._choices: dict[tuple[object, ...], _Choices] = {}
        self._epoch = -1
        self._last: tuple[Context, _Choices] | None = None

    # ------------------------------------------------------------------ scorer
    def score(self, ctx: Context) -> FloatArray:
        state = ctx.state
        before = self.frag.current()  # refreshes the shape table on an epoch change
        choices = self._choices_for(ctx)
        candidates = np.flatnonzero(ctx.node_fit)
        stale = candidates[choices.version[candidates] != state.node_version[candidates]]
        if stale.size:
            after, column = self._evaluate(ctx, self.frag.table, stale, before[stale])
            choices.frag_after[stale] = after
            choices.column[stale] = column
            choices.version[stale] = state.node_version[stale]
        self._last = (ctx, choices)
        return _score(before, choices.frag_after)

    def pick(self, ctx: Context, node: int) -> list[int] | None:
        if ctx.k == 1:
            if self._last is None or self._last[0] is not ctx:
                self.score(
                    ctx
                )  # the engine skips scoring when one node fits; the device still matters
            assert self._last is not None
            column = int(self._last[1].column[node])
            if column >= 0:
                return [column]
        if ctx.k > 1 and ctx.dev_fit is not None:
            return [int(c) for c in np.flatnonzero(ctx.dev_fit[node])[: ctx.k]]
        return None

    # ------------------------------------------------------------------ internals
    def _choices_for(self, ctx: Context) -> _Choices:
        state = ctx.state
        if self._epoch != state.epoch:
            self._choices.clear()
            self._epoch = state.epoch
        d = ctx.req.devices
        key = (
            ctx.req.cpu_milli,
            ctx.req.memory_mib,
            ctx.k,
            ctx.need_core,
            d.memory_mib,
            d.need_memory_permille,
            d.topology,
            d.selector_key(),
        )
        found = self._choices.get(key)
        if found is None:
            n = state.n_nodes
            found = _Choices(np.full(n, np.inf), np.full(n, -1, np.int64), np.full(n, -1, np.int64))
            self._choices[key] = found
        return found

    def _evaluate(
        self, ctx: Context, table: ShapeTable, nodes: IndexArray, before: FloatArray
    ) -> tuple[FloatArray, IntArray]:
        """Best fragmentation after placing one replica on each of ``nodes``, and the device."""
        s = ctx.state
        cpu_after = s.node_cpu_free[nodes] - ctx.req.cpu_milli
        mem_after = s.node_mem_free[nodes] - ctx.req.memory_mib
        view = node_view(s, table, nodes)
        column = np.full(nodes.size, -1, np.int64)
        if ctx.k == 0:
            fits = shape_fits(table, view.usable_count, cpu_after, mem_after)
            after: FloatArray = table.weights @ (view.idle[None] - fits * view.usable_idle)
            return after, column
        assert ctx.dev_fit is not None
        dev_fit = ctx.dev_fit[nodes]
        need_mib = ctx.need_mib if isinstance(ctx.need_mib, int) else ctx.need_mib[nodes]
        if ctx.k == 1:
            return self._one_device(
                ctx, table, nodes, view, dev_fit, need_mib, cpu_after, mem_after, before
            )
        taken = dev_fit & (np.cumsum(dev_fit, axis=1) <= ctx.k)
        free = s.dev_core_free[nodes] - taken * ctx.need_core
        mem = s.dev_mem_free[nodes] - taken * need_mib
        usable = (
            table.eligible[:, nodes]
            & (free[None] >= table.need_core[:, None, None])
            & (mem[None] >= table.need_mib[:, nodes])
        )
        fits = shape_fits(table, usable.sum(axis=2), cpu_after, mem_after)
        frag = free.sum(axis=1)[None] - fits * (free[None] * usable).sum(axis=2)
        after = table.weights @ frag
        return after, column

    @staticmethod
    def _one_device(
        ctx: Context,
        table: ShapeTable,
        nodes: IndexArray,
        view: NodeView,
        dev_fit: BoolArray,
        need_mib: int | IntArray,
        cpu_after: IntArray,
        mem_after: IntArray,
        before: FloatArray,
    ) -> tuple[FloatArray, IntArray]:
        """Every fitting device of every node as the target: ``[M, S, W]`` incremental update.

        The device kept is the lowest column with the best *integer* score, as the paper's
        simulator does, not the one with the smallest exact fragmentation.
        """
        s: ClusterState = ctx.state
        free = s.dev_core_free[nodes]
        free_after = free - ctx.need_core
        mem_after_dev = s.dev_mem_free[nodes] - need_mib
        usable_after = (
            table.eligible[:, nodes]
            & (free_after[None] >= table.need_core[:, None, None])
            & (mem_after_dev[None] >= table.need_mib[:, nodes])
        )
        usable_idle = (
            view.usable_idle[:, :, None]
            - free[None] * view.usable
            + free_after[None] * usable_after
        )
        usable_count = view.usable_count[:, :, None] - view.usable + usable_after
        fits = (
            (usable_count >= table.count[:, None, None])
            & (cpu_after[None, :, None] >= table.cpu[:, None, None])
            & (mem_after[None, :, None] >= table.memory[:, None, None])
            & ~table.cpu_only[:, None, None]
        )
        idle_after = (view.idle - ctx.need_core)[None, :, None]
        frag = np.einsum("m,msw->sw", table.weights, idle_after - fits * usable_idle)
        scores = np.where(dev_fit, _score(before[:, None], frag), -np.inf)
        column = np.argmax(scores, axis=1).astype(np.int64)
        after: FloatArray = frag[np.arange(nodes.size), column]
        return after, column


def _score(before: FloatArray, after: FloatArray) -> FloatArray:
    """``floor(100 * sigmoid((before - after) / 1000))``: 50 means no change, in 0..99."""
    delta = np.clip((before - after) / 1000.0, -50.0, 50.0)
    result: FloatArray = np.floor(100.0 / (1.0 + np.exp(-delta)))
    return result
