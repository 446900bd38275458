"""FGD: place where the target workload's expected fragmentation grows least (Weng et al., ATC'23).

For each fitting node the scorer evaluates every way the replica could land there (each fitting
device for a one-device replica; the first k fitting devices for k devices), computes the node's
fragmentation after it (``engine/fragmentation.py``) and keeps the best. The node score is the
paper's ``floor(100 * sigmoid((F_before - F_after) / 1000))``: an integer, so ties are common and go
to the engine's seeded node order. The device kept is the lowest column with the best score.

Cost: what a placement does to a node depends only on that node's state and the replica's amounts,
so results are cached and recomputed only for nodes whose version moved. For one-device replicas
the cache holds the fragmentation after placing on *each* device, keyed by the amounts alone (CPU,
compute, memory): which devices the request may use is applied when scoring, so requests that
differ only in models, UUIDs or software share one cache.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise
from typing import ClassVar

import numpy as np

from xpupool.engine.context import Context
from xpupool.engine.fragmentation import (
    FragmentationCache,
    IndexArray,
    ServedShapes,
    ShapeTable,
    TargetWorkload,
    cpu_capped,
    settled,
    shape_fits,
)
from xpupool.engine.scorers.base import ScorerEnv
from xpupool.engine.state import FloatArray, IntArray


@dataclass(slots=True)
class _Cached:
    """Fragmentation after placement: ``[N]`` per node, or ``[N, W]`` per device for one-device
    replicas; ``version`` [N] is the node_version it was computed at (-1 = never)."""

    frag_after: FloatArray
    version: IntArray
    # A subclass's score derived from ``frag_after`` and the node's state: recomputed, like
    # ``frag_after``, only where the node changed (``_fragmentation``'s ``stale``).
    score: FloatArray | None = None


class Fgd:
    name: ClassVar[str] = "fgd"

    def __init__(
        self, env: ScorerEnv, workload: TargetWorkload | None = None, capped: bool = False
    ) -> None:
        workload = workload or env.workload
        if workload is None:
            raise ValueError("the fgd scorer needs a target workload (Engine(..., workload=...))")
        self.frag = FragmentationCache(env.pipeline.state, env.pipeline, workload, capped)
        self._cache: dict[tuple[object, ...], _Cached] = {}
        self._epoch = -1
        self._columns: tuple[Context, IntArray] | None = None

    # ------------------------------------------------------------------ scorer
    def score(self, ctx: Context) -> FloatArray:
        state = ctx.state
        before, cached, candidates, _ = self._fragmentation(ctx)
        if cached.frag_after.ndim == 1:
            return _score(before, cached.frag_after)
        # One device: best fitting device per candidate node, lowest column on equal scores.
        assert ctx.dev_fit is not None
        scores = np.zeros(state.n_nodes, np.float64)
        columns = np.full(state.n_nodes, -1, np.int64)
        if candidates.size:
            per_device = _score(before[candidates, None], cached.frag_after[candidates])
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
        if ctx.k > 1 and ctx.dev_fit is not None:
            return [int(c) for c in np.flatnonzero(ctx.dev_fit[node])[: ctx.k]]
        return None

    # ------------------------------------------------------------------ internals
    def _fragmentation(self, ctx: Context) -> tuple[FloatArray, _Cached, IndexArray, IndexArray]:
        """Fragmentation of every node now, after placing on each candidate (recomputed only for
        nodes that changed), the candidates, and those recomputed (``stale``)."""
        state = ctx.state
        before = self.frag.current()  # refreshes the shape table on an epoch change
        cached = self._cached_for(ctx)
        candidates = np.flatnonzero(ctx.node_fit)
        stale = candidates[cached.version[candidates] != state.node_version[candidates]]
        if stale.size:
            cached.frag_after[stale] = settled(self._evaluate(ctx, self.frag.table, stale))
            cached.version[stale] = state.node_version[stale]
        return before, cached, candidates, stale

    def _cached_for(self, ctx: Context) -> _Cached:
        state = ctx.state
        if self._epoch != state.epoch:
            self._cache.clear()
            self._epoch = state.epoch
        d = ctx.req.devices
        # Memory matters only if some target shape asks for node memory (the paper's do not).
        memory = ctx.req.memory_mib if self.frag.table.memory.any() else 0
        amounts = (
            ctx.req.cpu_milli,
            memory,
            ctx.k,
            ctx.need_core,
            d.memory_mib,
            d.need_memory_permille,
        )
        # k > 1 takes "the first k fitting devices", which depends on what the request may use.
        within = None if ctx.within is None else hash(ctx.within.tobytes())
        key = amounts if ctx.k <= 1 else (*amounts, d.topology, d.selector_key(), within)
        found = self._cache.get(key)
        if found is None:
            n, w = state.dev_present.shape
            shape = (n, w) if ctx.k == 1 else (n,)
            found = _Cached(np.full(shape, np.inf), np.full(n, -1, np.int64))
            self._cache[key] = found
        return found

    def _evaluate(self, ctx: Context, table: ShapeTable, nodes: IndexArray) -> FloatArray:
        """Fragmentation after placing one replica on each of ``nodes`` (``[S]``, or ``[S, W]`` for
        every device of a one-device replica)."""
        s = ctx.state
        cpu_after = s.node_cpu_free[nodes] - ctx.req.cpu_milli
        mem_after = s.node_mem_free[nodes] - ctx.req.memory_mib
        if ctx.k == 0:
            view = self.frag.view(nodes)
            fits = shape_fits(table, view.usable_count, cpu_after, mem_after)
            usable_idle: IntArray | FloatArray = view.usable_idle
            if self.frag.capped:
                usable_idle = cpu_capped(table, usable_idle, cpu_after, mem_after)
            after: FloatArray = (view.idle[:, None] - fits * usable_idle) @ table.weights
            return after
        need_mib = ctx.need_mib if isinstance(ctx.need_mib, int) else ctx.need_mib[nodes]
        if ctx.k == 1:
            return _each_device(ctx, self.frag, nodes, need_mib, cpu_after, mem_after)
        assert ctx.dev_fit is not None
        dev_fit = ctx.dev_fit[nodes]
        taken = dev_fit & (np.cumsum(dev_fit, axis=1) <= ctx.k)
        free = s.dev_core_free[nodes] - taken * ctx.need_core
        mem = s.dev_mem_free[nodes] - taken * need_mib
        usable_count, usable_sum = _usable_after_taking(table, nodes, free, mem)
        fits = shape_fits(table, usable_count, cpu_after, mem_after)
        if self.frag.capped:
            usable_sum = cpu_capped(table, usable_sum, cpu_after, mem_after)
        after = (free.sum(axis=1)[:, None] - fits * usable_sum) @ table.weights
        return after


def _usable_after_taking(
    table: ShapeTable, nodes: IndexArray, free: IntArray, mem: IntArray
) -> tuple[IntArray, IntArray | FloatArray]:
    """``[S, M]`` usable devices and their idle compute per shape, given the devices' ``free``
    compute and ``mem`` after taking some (``[S, W]``). Only the shapes each node's kind serves are
    evaluated: on the others every device needs ``NEVER`` MiB, so their zeros are exact."""
    count = np.zeros((nodes.size, table.weights.size), np.int64)
    idle = np.zeros((nodes.size, table.weights.size), np.int64)
    kind_of = table.node_kind[nodes]
    for kind_index in np.unique(kind_of).tolist():
        kind = table.kinds[kind_index]
        at = np.flatnonzero(kind_of == kind_index)
        block = (at[:, None], kind.column)
        usable = (free[at, None] >= kind.need_core[None, :, None]) & (
            mem[at, None] >= table.need_mib[nodes[at][:, None], kind.column]
        )
        count[block] = usable.sum(axis=2)
        idle[block] = (free[at, None] * usable).sum(axis=2)
    return count, idle


def _each_device(
    ctx: Context,
    frag: FragmentationCache,
    nodes: IndexArray,
    need_mib: int | IntArray,
    cpu_after: IntArray,
    mem_after: IntArray,
) -> FloatArray:
    """``[S, W]``: fragmentation after placing the replica on each device of each node, by an
    incremental update of the node's per-shape quantities. Values for devices the replica does
    not fit are meaningless; the caller masks them.

    A shape no device of a node can serve leaves all the node's idle capacity as fragment, before
    and after, whatever device is taken; so nodes are grouped by kind (the shapes they can serve)
    and only those shapes get the ``[nodes, shapes, devices]`` update. On a mixed fleet that is a
    fraction.
    """
    table = frag.table
    idle_after = (frag.idle(nodes) - ctx.need_core).astype(np.float64)
    kind_of = table.node_kind[nodes]
    first = int(kind_of[0])
    if (kind_of == first).all():  # one kind of node (always so on a one-vendor trace)
        kind = table.kinds[first]
        served = _served_shapes(ctx, frag, kind, nodes, need_mib, cpu_after, mem_after, idle_after)
        return served if kind.every else served + kind.rest * idle_after[:, None]
    out = np.empty(ctx.state.dev_core_free[nodes].shape, np.float64)
    order = np.argsort(kind_of, kind="stable")
    sorted_kinds = kind_of[order]
    cuts = [0, *(np.flatnonzero(sorted_kinds[1:] != sorted_kinds[:-1]) + 1).tolist(), nodes.size]
    for start, end in pairwise(cuts):
        at = order[start:end]
        kind = table.kinds[int(sorted_kinds[start])]
        served = _served_shapes(
            ctx,
            frag,
            kind,
            nodes[at],
            need_mib if isinstance(need_mib, int) else need_mib[at],
            cpu_after[at],
            mem_after[at],
            idle_after[at],
        )
        out[at] = served + kind.rest * idle_after[at, None]
    return out


def _served_shapes(
    ctx: Context,
    frag: FragmentationCache,
    kind: ServedShapes,
    nodes: IndexArray,
    mem_need: int | IntArray,
    cpu_after: IntArray,
    mem_after: IntArray,
    idle_after: FloatArray,
) -> FloatArray:
    """Weighted fragment of the shapes ``kind`` serves after placing on each device of ``nodes``,
    which are of that kind: ``[S, W]``."""
    s = ctx.state
    table = frag.table
    if kind.shapes.size == 0:
        return np.zeros(s.dev_core_free[nodes].shape, np.float64)
    view = frag.view(nodes, kind)
    need_of_shape = (
        table.need_mib[nodes] if kind.every else table.need_mib[nodes[:, None], kind.column]
    )
    usable = view.usable
    free = s.dev_core_free[nodes]
    free_after = free - ctx.need_core
    usable_after = (free_after[:, None] >= kind.need_core[None, :, None]) & (
        (s.dev_mem_free[nodes] - mem_need)[:, None] >= need_of_shape
    )
    usable_idle = (
        view.usable_idle[:, :, None] - free[:, None] * usable + free_after[:, None] * usable_after
    )
    usable_count = view.usable_count[:, :, None] - usable + usable_after
    node_fits = (
        (cpu_after[:, None] >= kind.cpu[None])
        & (mem_after[:, None] >= kind.memory[None])
        & kind.device_shape[None]
    )
    fits = (usable_count >= kind.count[None, :, None]) & node_fits[:, :, None]
    if frag.capped:
        shape_rows = slice(None) if kind.every else kind.shapes
        cap = cpu_capped(table, np.full(node_fits.shape, np.inf), cpu_after, mem_after, shape_rows)
        usable_idle = np.minimum(usable_idle, cap[:, :, None])
    result: FloatArray = np.einsum(
        "m,smw->sw", kind.weights, idle_after[:, None, None] - fits * usable_idle
    )
    return result


def _score(before: FloatArray, after: FloatArray) -> FloatArray:
    """``floor(100 * sigmoid((before - after) / 1000))``: 50 means no change, in 0..99."""
    delta = np.clip((before - after) / 1000.0, -50.0, 50.0)
    result: FloatArray = np.floor(100.0 / (1.0 + np.exp(-delta)))
    return result
