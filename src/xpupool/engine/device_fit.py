"""The devices where one share of a request fits now, kept current per request shape.

A stream of requests asks for a few hundred device shapes at most, and one placement changes one
node. So instead of re-checking the whole ``[N, W]`` grid for every request, the pipeline keeps,
per device shape, the answer it gave last time and the state's change number then, and re-checks
only the rows of the nodes changed since (``ClusterState.changed_since``): a request costs what
changed, not the size of the fleet. An inventory change (a new ``epoch``) starts the shape afresh.
The answer is the same as checking every card: the selectors' mask (``Pipeline.eligible``) and
the capacity predicate (``capacity.share_fits``), the per-node count of cards that pass, and, for
several cards, the largest number of them inside one group of the request's topology (a NUMA node
for ``same-numa``, else a link group). It also keeps how many cards pass
the predicate's first part and its first two (memory; memory and cores), so that a refusal can say
which part fails first on each node without replaying the checks over the whole grid.

An answer is updated in place, as the fragmentation cache's values are: it holds until the next
request of the same shape is filtered (a context is used before the next one is built).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from xpupool.engine.capacity import cores_fit, memory_fits, share_parts_one, slot_free
from xpupool.engine.compiled import jit
from xpupool.engine.lru import Lru
from xpupool.engine.state import BoolArray, ClusterState, CountArray, IntArray
from xpupool.engine.topology import best_group_count, device_groups
from xpupool.model.request import DeviceRequest

# Shapes kept (each about 50 KB at 5,000 nodes of 8 cards): a mixed stream uses a few hundred,
# a real trace a few dozen; the bound keeps a long-running server's memory flat.
SHAPES_BOUND = 256
# The capacity filters in the chain's order, which ``DeviceFit.passed``'s rows follow.
CAPACITY_PARTS = ("DeviceMemory", "DeviceCores", "DeviceTasks")
# Past this share of the fleet changed, checking every row at once is cheaper than row by row.
FULL_SHARE = 0.25


@dataclass(slots=True)
class DeviceFit:
    """One shape's answer: ``dev_fit [N, W]`` cards where a share fits, ``passed [3, N]`` per
    node the eligible cards that pass the memory part, the memory and cores parts, and all of the
    predicate (``count``, its last row), ``group_best [N]`` the most fitting cards in one group of
    the shape's topology (``topology.device_groups``; only for several cards), all as of change
    number ``seq`` in ``epoch``."""

    epoch: int
    seq: int
    dev_fit: BoolArray
    passed: CountArray
    group_best: CountArray | None

    @property
    def count(self) -> CountArray:
        """``[N]`` cards per node where a share fits."""
        result: CountArray = self.passed[2]
        return result


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


def _refresh_rows_loop(
    rows: Any,
    eligible: Any,
    mem_free: Any,
    core_free: Any,
    task_free: Any,
    need_grid: Any,
    scalar_need: Any,
    need_core: Any,
    dev_group: Any,
    dev_fit: Any,
    passed: Any,
    group_best: Any,
    has_group: Any,
    seen: Any,
) -> None:
    """Re-check, in place, the nodes in ``rows``: the capacity predicate's parts on each eligible
    card (``need_grid`` per card when ``scalar_need`` < 0), the counts that pass them, and the
    most fitting cards in one group of ``dev_group`` (``has_group``). A node is in ``rows`` once per change
    (a packing policy changes the same few nodes over and over): ``seen``, all False on entry and
    on return, makes each count once."""
    width = dev_fit.shape[1]
    for n in rows:
        if seen[n]:
            continue
        seen[n] = True
        c_mem = c_core = c = 0
        for w in range(width):
            need = need_grid[n, w] if scalar_need < 0 else scalar_need
            mem_ok, core_ok, slot_ok = share_parts_one(
                mem_free[n, w], core_free[n, w], task_free[n, w], need, need_core
            )
            mem_ok = mem_ok and eligible[n, w]
            core_ok = core_ok and mem_ok
            ok = slot_ok and core_ok
            dev_fit[n, w] = ok
            c_mem += mem_ok
            c_core += core_ok
            c += ok
        passed[0, n] = c_mem
        passed[1, n] = c_core
        passed[2, n] = c
        if has_group:
            best = 0
            for w in range(width):
                if dev_fit[n, w] and dev_group[n, w] >= 0:
                    same = 0
                    for v in range(width):
                        same += dev_fit[n, v] and dev_group[n, v] == dev_group[n, w]
                    best = max(best, same)
            group_best[n] = best
    for n in rows:
        seen[n] = False


_refresh_rows = jit(_refresh_rows_loop)


class DeviceFitCache:
    """:class:`DeviceFit` per (device request, disabled filters), bounded by :data:`SHAPES_BOUND`."""

    def __init__(self, state: ClusterState, bound: int = SHAPES_BOUND) -> None:
        self.state = state
        self._fits: Lru[tuple[DeviceRequest, frozenset[str]], DeviceFit] = Lru(bound)
        self._seen = np.zeros(state.n_nodes, np.bool_)  # the refresh's scratch, all False

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
        changed = None if fit is None or fit.epoch != s.epoch else s.changed_since(fit.seq)
        if fit is None or changed is None or len(changed) > FULL_SHARE * s.n_nodes:
            return self._fits.put(key, self._compute(devices, eligible, need_mib, need_core))
        if changed.size:
            if self._seen.size != s.n_nodes:  # nodes were added
                self._seen = np.zeros(s.n_nodes, np.bool_)
            _refresh_rows(
                changed,
                eligible,
                s.dev_mem_free,
                s.dev_core_free,
                s.dev_task_free,
                need_mib if isinstance(need_mib, np.ndarray) else s.dev_mem_free,
                need_mib if isinstance(need_mib, int) else -1,
                need_core,
                device_groups(s, devices.topology),
                fit.dev_fit,
                fit.passed,
                fit.group_best if fit.group_best is not None else fit.passed[2],
                fit.group_best is not None,
                self._seen,
            )
            fit.seq = s.change_seq
        return fit

    def _compute(
        self, devices: DeviceRequest, eligible: BoolArray, need_mib: int | IntArray, need_core: int
    ) -> DeviceFit:
        s = self.state
        by_mem = eligible & memory_fits(s.dev_mem_free, need_mib)
        by_core = by_mem & cores_fit(s.dev_core_free, need_core) if need_core else by_mem
        dev_fit = by_core & slot_free(s.dev_task_free) if s.tasks_limited else by_core
        # Small counts in small integers: a stream keeps a few hundred shapes, and what a request
        # reads of its shape stays in the processor's cache far more often.
        small = np.int8 if s.width < 128 else np.int64
        passed = cast(CountArray, np.empty((3, s.n_nodes), small))
        passed[0] = count_per_node(by_mem)
        passed[1] = passed[0] if by_core is by_mem else count_per_node(by_core)
        passed[2] = passed[1] if dev_fit is by_core else count_per_node(dev_fit)
        group_best: CountArray | None = None
        if devices.count > 1:
            best = best_group_count(s, dev_fit, devices.topology)
            group_best = cast(CountArray, best.astype(small))
        return DeviceFit(s.epoch, s.change_seq, np.ascontiguousarray(dev_fit), passed, group_best)
