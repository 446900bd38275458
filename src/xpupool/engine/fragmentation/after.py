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
from xpupool.engine.fragmentation.kernels import Replica, node_after, one_card_after
from xpupool.engine.fragmentation.measure import IndexArray, ShapeTable
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
    fragmentation after placing it (current on every candidate), the candidates, and how many of
    them were recomputed for this request."""

    before: FloatArray
    after: Cached
    candidates: IndexArray
    recomputed: int


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
        nodes that changed), the candidates, and how many were recomputed."""
        state = ctx.state
        before = self.frag.current()  # refreshes the shape table on an epoch change
        cached = self._cached_for(ctx)
        candidates = ctx.candidates()
        # Checked, computed and kept in one pass over the candidates.
        frag, replica = self.frag, _replica(ctx)
        args = (candidates, frag.table.arrays, state, frag.cached())
        kept = (frag.capped, cached.frag_after, cached.version)
        if ctx.k == 1:
            done = one_card_after(*args, replica, *kept)
        else:
            done = node_after(*args, (ctx.k, ctx.dev_fit), replica, *kept)
        return Fragmentation(before, cached, candidates, done)

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
        every device of a one-device replica), not settled."""
        args = (nodes, table.arrays, ctx.state, self.frag.cached())
        out: FloatArray
        if ctx.k == 1:
            out = np.empty((nodes.size, ctx.state.width), np.float64)
            one_card_after(*args, _replica(ctx), self.frag.capped, out)
        else:
            out = np.empty(nodes.size, np.float64)
            node_after(*args, (ctx.k, ctx.dev_fit), _replica(ctx), self.frag.capped, out)
        return out


def _replica(ctx: Context) -> Replica:
    return Replica(ctx.need_core, ctx.need_mib, ctx.req.cpu_milli, ctx.req.memory_mib)
