"""The devices where one share of a request fits now, kept current per request shape.

A stream of requests asks for a few hundred device shapes at most, and one placement changes one
node. So instead of re-checking the whole ``[N, W]`` grid for every request, the pipeline keeps,
per device shape, the answer it gave last time with the node versions it was computed at, and
re-checks only the rows of nodes whose version moved since (``ClusterState.node_version``), as the
fragmentation cache does. An inventory change (a new ``epoch``) starts the shape afresh. The
answer is the same as checking every card: the selectors' mask (``Pipeline.eligible``) and the
capacity predicate (``capacity.share_fits``), the per-node count of cards that pass, and, for
several cards, the largest number of them inside one link group.

Arrays handed out are never changed afterwards (an update writes a fresh copy), so a context that
holds an older answer keeps it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from xpupool.engine.capacity import share_fits
from xpupool.engine.lru import Lru
from xpupool.engine.state import BoolArray, ClusterState, IntArray
from xpupool.engine.topology import best_group_count, best_group_count_rows
from xpupool.model.request import DeviceRequest

# Shapes kept (each about 100 KB at 5,000 nodes of 8 cards): a mixed stream uses a few hundred,
# a real trace a few dozen; the bound keeps a long-running server's memory flat.
SHAPES_BOUND = 256
# Past this share of stale nodes, checking every row at once is cheaper than gathering rows.
FULL_SHARE = 0.25


@dataclass(slots=True)
class DeviceFit:
    """One shape's answer: ``dev_fit [N, W]`` cards where a share fits, ``count [N]`` of them per
    node, ``group_best [N]`` the most of them in one link group (only for several cards), all as
    of ``version`` (the nodes' versions) in ``epoch``."""

    epoch: int
    version: IntArray
    dev_fit: BoolArray
    count: IntArray
    group_best: IntArray | None


def count_per_node(mask: BoolArray) -> IntArray:
    """``[N]`` number of True per row of an ``[N, W]`` mask, W a multiple of 8.

    Eight booleans are one 64-bit word; ``bitwise_count`` counts the set bytes' low bits at once.
    """
    words = np.ascontiguousarray(mask).view(np.uint64)
    counts = np.bitwise_count(words)
    result: IntArray = (counts[:, 0] if counts.shape[1] == 1 else counts.sum(axis=1)).astype(
        np.int64
    )
    return result


class DeviceFitCache:
    """:class:`DeviceFit` per (device request, disabled filters), bounded by :data:`SHAPES_BOUND`."""

    def __init__(self, state: ClusterState, bound: int = SHAPES_BOUND) -> None:
        self.state = state
        self._fits: Lru[tuple[DeviceRequest, frozenset[str]], DeviceFit] = Lru(bound)

    def get(
        self,
        devices: DeviceRequest,
        filters_off: frozenset[str],
        eligible: BoolArray,
        need_mib: int | IntArray,
        need_core: int,
    ) -> DeviceFit:
        """The shape's answer now; ``eligible`` is its selectors' mask for the current epoch."""
        s = self.state
        key = (devices, filters_off)
        fit = self._fits.get(key)
        if fit is None or fit.epoch != s.epoch or fit.version.size != s.n_nodes:
            return self._fits.put(key, self._compute(devices, eligible, need_mib, need_core))
        stale = np.flatnonzero(fit.version != s.node_version)
        if not stale.size:
            return fit
        if stale.size > FULL_SHARE * s.n_nodes:
            return self._fits.put(key, self._compute(devices, eligible, need_mib, need_core))
        need = need_mib if isinstance(need_mib, int) else need_mib[stale]
        rows = eligible[stale] & share_fits(
            s.dev_mem_free[stale],
            s.dev_core_free[stale],
            s.dev_task_free[stale],
            need,
            need_core,
        )
        dev_fit = fit.dev_fit.copy()
        dev_fit[stale] = rows
        count = fit.count.copy()
        count[stale] = count_per_node(rows)
        group_best = None
        if fit.group_best is not None:
            group_best = fit.group_best.copy()
            group_best[stale] = best_group_count_rows(s, rows, stale)
        version = fit.version.copy()
        version[stale] = s.node_version[stale]
        fresh = DeviceFit(s.epoch, version, dev_fit, count, group_best)
        return self._fits.put(key, fresh)

    def _compute(
        self, devices: DeviceRequest, eligible: BoolArray, need_mib: int | IntArray, need_core: int
    ) -> DeviceFit:
        s = self.state
        dev_fit = eligible & share_fits(
            s.dev_mem_free, s.dev_core_free, s.dev_task_free, need_mib, need_core
        )
        count = count_per_node(dev_fit)
        group_best = best_group_count(s, dev_fit) if devices.count > 1 else None
        return DeviceFit(s.epoch, s.node_version.copy(), dev_fit, count, group_best)

    def clear(self) -> None:
        self._fits.clear()
