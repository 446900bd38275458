"""FGD's fragmentation after placing one replica on each candidate, kept per request amounts.

What a placement does to a node depends only on that node's state and the replica's amounts, so
results are cached and recomputed only for nodes whose version moved. For one-device replicas the
cache holds the fragmentation after placing on *each* device, keyed by the amounts alone (CPU,
compute, memory): which devices the request may use is applied when scoring, so requests that
differ only in models, UUIDs or software share one cache. FGD's scorer and xpupool's shared
workload model each keep one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from xpupool.engine.context import Context
from xpupool.engine.fragmentation.cache import FragmentationCache
from xpupool.engine.fragmentation.kernels import node_quantities, one_card_after
from xpupool.engine.fragmentation.measure import (
    IndexArray,
    ShapeTable,
    expected_fragment,
    settled,
)
from xpupool.engine.lru import Lru
from xpupool.engine.state import ClusterState, FloatArray, IntArray

# What the per-amounts cache may hold: each entry is a few [N, W] float arrays (about 0.6 MB at
# 5,000 nodes of 8 cards), one per distinct (CPU, compute, memory) a stream asks for; the FGD
# traces ask a few hundred. Past the bound the least recently used amounts are recomputed.
CACHE_BYTES = 256 << 20
CACHE_ENTRIES = (16, 1024)  # at least, at most


@dataclass(slots=True)
class Cached:
    """Fragmentation after placement: ``[N]`` per node, or ``[N, W]`` per device for one-device
    replicas; ``version`` [N] is the node_version it was computed at (-1 = never)."""

    frag_after: FloatArray
    version: IntArray


@dataclass(frozen=True, slots=True)
class Fragmentation:
    """One request's view: every node's fragmentation now (``before``, ``[N]``), the cached
    fragmentation after placing it (current on every candidate), the candidates, and those
    recomputed for this request (``stale``)."""

    before: FloatArray
    after: Cached
    candidates: IndexArray
    stale: IndexArray


def cache_bound(state: ClusterState) -> int:
    """Entries of the per-amounts cache: as many as ``CACHE_BYTES`` holds for this fleet (a
    per-card after and score array, and the version), within ``CACHE_ENTRIES``."""
    n, w = state.dev_present.shape
    entry = max(1, (2 * n * w + n) * 8)
    low, high = CACHE_ENTRIES
    return min(high, max(low, CACHE_BYTES // entry))


class AfterPlacement:
    """The per-amounts cache of fragmentation after placement, over one :class:`FragmentationCache`
    (a new measure, after the workload was re-learned, takes a new one)."""

    def __init__(self, frag: FragmentationCache) -> None:
        self.frag = frag
        self.cache: Lru[tuple[object, ...], Cached] = Lru(cache_bound(frag.state))
        self._epoch = -1

    def evaluate(self, ctx: Context) -> Fragmentation:
        """Fragmentation of every node now, after placing on each candidate (recomputed only for
        nodes that changed), the candidates, and those recomputed (``stale``)."""
        state = ctx.state
        before = self.frag.current()  # refreshes the shape table on an epoch change
        cached = self._cached_for(ctx)
        candidates = ctx.candidates()
        stale = candidates[cached.version[candidates] != state.node_version[candidates]]
        if stale.size:
            cached.frag_after[stale] = settled(self.evaluate_nodes(ctx, self.frag.table, stale))
            cached.version[stale] = state.node_version[stale]
        return Fragmentation(before, cached, candidates, stale)

    def amounts(self, ctx: Context) -> tuple[object, ...]:
        """The request's key in the cache: equal keys, equal fragmentation after placement on a
        node in a given state (as of the shape table the last :meth:`evaluate` used)."""
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
        return amounts if ctx.k <= 1 else (*amounts, d.topology, d.selector_key(), within)

    def _cached_for(self, ctx: Context) -> Cached:
        state = ctx.state
        if self._epoch != state.epoch:
            self.cache.clear()
            self._epoch = state.epoch
        key = self.amounts(ctx)
        found = self.cache.get(key)
        if found is None:
            n, w = state.dev_present.shape
            shape = (n, w) if ctx.k == 1 else (n,)
            found = self.cache.put(key, Cached(np.full(shape, np.inf), np.full(n, -1, np.int64)))
        return found

    def evaluate_nodes(self, ctx: Context, table: ShapeTable, nodes: IndexArray) -> FloatArray:
        """Fragmentation after placing one replica on each of ``nodes`` (``[S]``, or ``[S, W]`` for
        every device of a one-device replica)."""
        s = ctx.state
        cpu_after = s.node_cpu_free[nodes] - ctx.req.cpu_milli
        mem_after = s.node_mem_free[nodes] - ctx.req.memory_mib
        if ctx.k == 0:
            # Nothing device-side changes: the nodes' cached quantities, with CPU and memory taken.
            _, usable_idle, usable_count, idle = self.frag.cached()
            return expected_fragment(
                table,
                idle[nodes],
                usable_idle[nodes],
                usable_count[nodes],
                cpu_after,
                mem_after,
                self.frag.capped,
            )
        need_mib = ctx.need_mib if isinstance(ctx.need_mib, int) else ctx.need_mib[nodes]
        if ctx.k == 1:
            return _each_device(ctx, self.frag, nodes, need_mib, cpu_after, mem_after)
        assert ctx.dev_fit is not None
        dev_fit = ctx.dev_fit[nodes]
        taken = dev_fit & (np.cumsum(dev_fit, axis=1) <= ctx.k)
        free = s.dev_core_free[nodes] - taken * ctx.need_core
        mem = s.dev_mem_free[nodes] - taken * need_mib
        tasks = s.dev_task_free[nodes] - taken
        idle, _, usable_idle, usable_count = node_quantities(
            nodes, table.arrays, free, mem, tasks, with_usable=False
        )
        return expected_fragment(
            table, idle, usable_idle, usable_count, cpu_after, mem_after, self.frag.capped
        )


def _each_device(
    ctx: Context,
    frag: FragmentationCache,
    nodes: IndexArray,
    need_mib: int | IntArray,
    cpu_after: IntArray,
    mem_after: IntArray,
) -> FloatArray:
    """``[S, W]``: fragmentation after placing the replica on each device of each node, by an
    incremental update of the node's cached per-shape quantities (only the taken device's
    usability changes), over the shapes the node's kind serves (``kernels.one_card_after``).
    Values for devices the replica does not fit are meaningless; the caller masks them."""
    return one_card_after(
        nodes,
        frag.table.arrays,
        ctx.state,
        frag.cached(),
        ctx.need_core,
        need_mib,
        cpu_after,
        mem_after,
        frag.capped,
    )
