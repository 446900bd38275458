"""Whether one share of a device request fits on a device: the one capacity rule of the engine.

A share of ``need_mib`` MiB and ``need_core`` thousandths of a device fits on a device that has
``mem_free`` MiB, ``core_free`` thousandths and ``tasks_free`` task slots free when all three
suffice. The filters (``filters/device_memory.py``, ``device_cores.py``, ``device_tasks.py``), the
state's check on apply, the gang bound, the fragmentation measure, its pressure, its compiled loops
and the stranded-capacity report all ask this module, so a new capacity rule is written here once;
``tests/unit/engine/test_capacity.py`` reads the sources and refuses a comparison of free device
capacity against a need anywhere else.

The rule has two forms with one definition (``_fits``): :func:`share_fits` on NumPy arrays of any
broadcastable shapes, and :data:`share_fits_one`, the same function compiled by Numba for scalars,
which the compiled loops call once per card; a property test checks that they agree.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from xpupool.engine.compiled import jit

BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]
Amount = int | IntArray

# Free task slots of a card that has no limit on the tasks sharing it: far more than any card can
# hold (a share takes at least one MiB or one thousandth), and far below int64's end, so that
# taking and giving back slots stays exact.
UNLIMITED_TASKS = 1 << 40


def memory_fits(mem_free: Amount, need_mib: Amount) -> BoolArray:
    """Devices with room for ``need_mib`` MiB (the DeviceMemory filter's part of the rule)."""
    result: BoolArray = np.greater_equal(mem_free, need_mib)
    return result


def cores_fit(core_free: Amount, need_core: Amount) -> BoolArray:
    """Devices with room for ``need_core`` thousandths (the DeviceCores filter's part)."""
    result: BoolArray = np.greater_equal(core_free, need_core)
    return result


def slot_free(tasks_free: Amount) -> BoolArray:
    """Devices that may take one more task (the DeviceTasks filter's part: HAMi's
    ``deviceSplitCount``)."""
    result: BoolArray = np.greater_equal(tasks_free, 1)
    return result


def _memory_part(mem_free: Any, need_mib: Any) -> Any:
    return mem_free >= need_mib


def _cores_part(core_free: Any, need_core: Any) -> Any:
    return core_free >= need_core


def _slot_part(tasks_free: Any) -> Any:
    return tasks_free >= 1


def _fits(mem_free: Any, core_free: Any, tasks_free: Any, need_mib: Any, need_core: Any) -> Any:
    """The rule itself, for arrays and (compiled) for scalars: ``&`` is the logical and of the
    three parts."""
    return (
        _memory_part(mem_free, need_mib)
        & _cores_part(core_free, need_core)
        & _slot_part(tasks_free)
    )


def share_fits(
    mem_free: Amount, core_free: Amount, tasks_free: Amount, need_mib: Amount, need_core: Amount
) -> BoolArray:
    """Elementwise: does one share of ``need_mib`` MiB and ``need_core`` thousandths fit on devices
    with ``mem_free``, ``core_free`` and ``tasks_free`` free? Arrays broadcast as NumPy does; the
    conjunction of :func:`memory_fits`, :func:`cores_fit` and :func:`slot_free`."""
    result: BoolArray = np.asarray(_fits(mem_free, core_free, tasks_free, need_mib, need_core))
    return result


# The scalar forms for the compiled loops: the three parts (explanations say which part fails) and
# ``share_fits_one(mem, core, tasks, need_mib, need_core)``, their conjunction.
_memory_part_one = jit(_memory_part)
_cores_part_one = jit(_cores_part)
_slot_part_one = jit(_slot_part)


def _fits_one(mem_free: Any, core_free: Any, tasks_free: Any, need_mib: Any, need_core: Any) -> Any:
    return (
        _memory_part_one(mem_free, need_mib)
        and _cores_part_one(core_free, need_core)
        and _slot_part_one(tasks_free)
    )


share_fits_one = jit(_fits_one)


def shares_that_fit(
    mem_free: IntArray,
    core_free: IntArray,
    tasks_free: IntArray,
    need_mib: Amount,
    need_core: int,
    cap: int,
) -> IntArray:
    """``[N, W]`` how many shares each device could still take one after another, at most ``cap``:
    the most ``k`` for which ``share_fits`` holds after ``k - 1`` shares were taken (so 0 where
    not even one fits)."""
    by_mem = copies(mem_free, need_mib, cap)
    by_core = copies(core_free, need_core, cap)
    result: IntArray = np.minimum(np.minimum(by_mem, by_core), np.minimum(tasks_free, cap))
    return result


def copies(free: IntArray, need: Amount, cap: int) -> IntArray:
    """How many times ``need`` fits in ``free``, elementwise, at most ``cap`` (no need: ``cap``)."""
    need_arr = np.broadcast_to(np.asarray(need, np.int64), free.shape)
    out: IntArray = np.where(need_arr > 0, free // np.maximum(need_arr, 1), cap)
    return np.minimum(out, cap)


# What :func:`first_short` says of a node: which part of the rule first leaves it short of cards.
ENOUGH, SHORT_OUTSIDE, SHORT_MEMORY, SHORT_CORES, SHORT_TASKS = range(5)


def _first_short_loop(
    dev: Any,
    within: Any,
    mem_free: Any,
    core_free: Any,
    tasks_free: Any,
    need_grid: Any,
    scalar_need: Any,
    need_core: Any,
    skip_tasks: Any,
    restricted: Any,
    k: Any,
    codes: Any,
    left: Any,
) -> None:
    """The loop behind :func:`first_short`, one pass over each node's cards. Masks are bytes
    (0/1) and the parts are combined with ``&``, without branches, which the compiler turns into
    vector code; ``within`` is ``dev`` itself when there is no restriction (``restricted`` False),
    ``skip_tasks`` 1 when no card has a task limit."""
    n_nodes, width = dev.shape
    for n in range(n_nodes):
        outside = memory = cores = tasks = 0
        for w in range(width):
            need = need_grid[n, w] if scalar_need < 0 else scalar_need
            o = dev[n, w] & within[n, w]
            m = o & _memory_part_one(mem_free[n, w], need)
            c = m & _cores_part_one(core_free[n, w], need_core)
            t = c & (skip_tasks | _slot_part_one(tasks_free[n, w]))
            outside += o
            memory += m
            cores += c
            tasks += t
            left[n, w] = t
        if restricted and outside < k:
            codes[n] = SHORT_OUTSIDE
        elif memory < k:
            codes[n] = SHORT_MEMORY
        elif cores < k:
            codes[n] = SHORT_CORES
        elif tasks < k:
            codes[n] = SHORT_TASKS
        else:
            codes[n] = ENOUGH


_first_short_compiled = jit(_first_short_loop)


def first_short(
    dev: BoolArray,
    within: BoolArray | None,
    mem_free: IntArray,
    core_free: IntArray,
    tasks_free: IntArray,
    need_mib: Amount,
    need_core: int,
    check_tasks: bool,
    k: int,
) -> tuple[IntArray, BoolArray]:
    """For a refusal's explanation: per node, the first part of the rule (the caller's
    restriction ``within``, then memory, cores, task slots) after which fewer than ``k`` of the
    ``dev`` cards are left (``SHORT_*``, or ``ENOUGH``), and the cards that pass every part.
    The same answer as applying :func:`memory_fits`, :func:`cores_fit` and :func:`slot_free` one
    after another and counting each time, in one compiled pass."""
    codes = np.empty(dev.shape[0], np.int64)
    left = np.empty(dev.shape, np.bool_)
    dev8 = np.ascontiguousarray(dev).view(np.uint8)
    _first_short_compiled(
        dev8,
        dev8 if within is None else np.ascontiguousarray(within).view(np.uint8),
        mem_free,
        core_free,
        tasks_free,
        need_mib if isinstance(need_mib, np.ndarray) else mem_free,
        need_mib if isinstance(need_mib, int) else -1,
        need_core,
        np.uint8(not check_tasks),
        within is not None,
        k,
        codes,
        left.view(np.uint8),
    )
    return codes, left
