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
from typing import ClassVar

import numpy as np

from xpupool.engine.context import Context
from xpupool.engine.fragmentation import (
    FragmentationCache,
    IndexArray,
    NodeView,
    ShapeTable,
    TargetWorkload,
    cpu_capped,
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
            cached.frag_after[stale] = self._evaluate(ctx, self.frag.table, stale)
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
            return _each_device(
                ctx,
                table,
                nodes,
                self.frag.view(nodes),
                need_mib,
                cpu_after,
                mem_after,
                self.frag.capped,
            )
        assert ctx.dev_fit is not None
        dev_fit = ctx.dev_fit[nodes]
        taken = dev_fit & (np.cumsum(dev_fit, axis=1) <= ctx.k)
        free = s.dev_core_free[nodes] - taken * ctx.need_core
        mem = s.dev_mem_free[nodes] - taken * need_mib
        usable = (free[:, None] >= table.need_core[None, :, None]) & (
            mem[:, None] >= table.need_mib[nodes]
        )
        fits = shape_fits(table, usable.sum(axis=2), cpu_after, mem_after)
        usable_sum: IntArray | FloatArray = (free[:, None] * usable).sum(axis=2)
        if self.frag.capped:
            usable_sum = cpu_capped(table, usable_sum, cpu_after, mem_after)
        after = (free.sum(axis=1)[:, None] - fits * usable_sum) @ table.weights
        return after


def _each_device(
    ctx: Context,
    table: ShapeTable,
    nodes: IndexArray,
    view: NodeView,
    need_mib: int | IntArray,
    cpu_after: IntArray,
    mem_after: IntArray,
    capped: bool = False,
) -> FloatArray:
    """``[S, W]``: fragmentation after placing the replica on each device of each node, by an
    incremental update of the node's per-shape quantities. Values for devices the replica does
    not fit are meaningless; the caller masks them.

    A shape no device of a node can serve leaves all the node's idle capacity as fragment, before
    and after, whatever device is taken; so nodes are grouped by the shapes they can serve and only
    those shapes get the ``[nodes, shapes, devices]`` update. On a mixed fleet that is a fraction.
    """
    idle_after = (view.idle - ctx.need_core).astype(np.float64)
    relevant = table.relevant[nodes]
    rows = _Rows(table.need_mib[nodes], view)
    if relevant.all():  # e.g. a one-vendor trace: no grouping, no gathering
        return _served_shapes(
            ctx, table, rows, None, nodes, None, need_mib, cpu_after, mem_after, idle_after, capped
        )
    groups: dict[bytes, list[int]] = {}
    for position in range(nodes.size):
        groups.setdefault(relevant[position].tobytes(), []).append(position)
    out = np.empty(ctx.state.dev_core_free[nodes].shape, np.float64)
    for served_by, positions in groups.items():
        at = np.asarray(positions, np.intp)
        shapes, rest = table.served(served_by, relevant[at[0]])
        served = _served_shapes(
            ctx,
            table,
            rows,
            shapes,
            nodes[at],
            at,
            need_mib if isinstance(need_mib, int) else need_mib[at],
            cpu_after[at],
            mem_after[at],
            idle_after[at],
            capped,
        )
        out[at] = served + rest * idle_after[at, None]
    return out


@dataclass(frozen=True, slots=True)
class _Rows:
    """The shape table's and the cache's ``[S, M, ...]`` rows of the nodes being evaluated,
    gathered once per evaluation (node-major, so one contiguous block per node)."""

    need_mib: IntArray
    view: NodeView


def _served_shapes(
    ctx: Context,
    table: ShapeTable,
    rows: _Rows,
    shapes: IndexArray | None,
    nodes: IndexArray,
    at: IndexArray | None,
    mem_need: int | IntArray,
    cpu_after: IntArray,
    mem_after: IntArray,
    idle_after: FloatArray,
    capped: bool = False,
) -> FloatArray:
    """Weighted fragment of ``shapes`` after placing on each device of ``nodes`` (the rows ``at``
    of ``rows``): ``[S, W]``. ``shapes`` and ``at`` None mean every shape and every row."""
    s = ctx.state
    view = rows.view
    if shapes is None or at is None:
        need_of_shape, usable = rows.need_mib, view.usable
        usable_idle_before, usable_count_before = view.usable_idle, view.usable_count
        weights, need_core, count = table.weights, table.need_core, table.count
        cpu, memory, cpu_only = table.cpu, table.memory, table.cpu_only
        shape_rows: IndexArray | slice = slice(None)
    else:
        if shapes.size == 0:
            return np.zeros(s.dev_core_free[nodes].shape, np.float64)
        block = np.ix_(at, shapes)  # the rows' [nodes, shapes] block only
        need_of_shape, usable = rows.need_mib[block], view.usable[block]
        usable_idle_before, usable_count_before = view.usable_idle[block], view.usable_count[block]
        weights, need_core, count = (
            table.weights[shapes],
            table.need_core[shapes],
            table.count[shapes],
        )
        cpu, memory, cpu_only = table.cpu[shapes], table.memory[shapes], table.cpu_only[shapes]
        shape_rows = shapes
    free = s.dev_core_free[nodes]
    free_after = free - ctx.need_core
    usable_after = (free_after[:, None] >= need_core[None, :, None]) & (
        (s.dev_mem_free[nodes] - mem_need)[:, None] >= need_of_shape
    )
    usable_idle = (
        usable_idle_before[:, :, None] - free[:, None] * usable + free_after[:, None] * usable_after
    )
    usable_count = usable_count_before[:, :, None] - usable + usable_after
    node_fits = (
        (cpu_after[:, None] >= cpu[None]) & (mem_after[:, None] >= memory[None]) & ~cpu_only[None]
    )
    fits = (usable_count >= count[None, :, None]) & node_fits[:, :, None]
    if capped:
        cap = cpu_capped(table, np.full(node_fits.shape, np.inf), cpu_after, mem_after, shape_rows)
        usable_idle = np.minimum(usable_idle, cap[:, :, None])
    result: FloatArray = np.einsum(
        "m,smw->sw", weights, idle_after[:, None, None] - fits * usable_idle
    )
    return result


def _score(before: FloatArray, after: FloatArray) -> FloatArray:
    """``floor(100 * sigmoid((before - after) / 1000))``: 50 means no change, in 0..99."""
    delta = np.clip((before - after) / 1000.0, -50.0, 50.0)
    result: FloatArray = np.floor(100.0 / (1.0 + np.exp(-delta)))
    return result
