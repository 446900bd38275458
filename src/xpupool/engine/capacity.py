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


def _fits(mem_free: Any, core_free: Any, tasks_free: Any, need_mib: Any, need_core: Any) -> Any:
    """The rule itself, for arrays and (compiled) for scalars: ``&`` is the logical and of both."""
    return (mem_free >= need_mib) & (core_free >= need_core) & (tasks_free >= 1)


def share_fits(
    mem_free: Amount, core_free: Amount, tasks_free: Amount, need_mib: Amount, need_core: Amount
) -> BoolArray:
    """Elementwise: does one share of ``need_mib`` MiB and ``need_core`` thousandths fit on devices
    with ``mem_free``, ``core_free`` and ``tasks_free`` free? Arrays broadcast as NumPy does; the
    conjunction of :func:`memory_fits`, :func:`cores_fit` and :func:`slot_free`."""
    result: BoolArray = np.asarray(_fits(mem_free, core_free, tasks_free, need_mib, need_core))
    return result


# The scalar form for the compiled loops: ``share_fits_one(mem, core, tasks, need_mib, need_core)``.
share_fits_one = jit(_fits)


def _parts(mem_free: Any, core_free: Any, tasks_free: Any, need_mib: Any, need_core: Any) -> Any:
    """The rule's three parts in the capacity filters' order (memory, cores, a task slot), for a
    refusal that must say which part failed first; their conjunction is :func:`_fits`."""
    return mem_free >= need_mib, core_free >= need_core, tasks_free >= 1


# ``share_parts_one(mem, core, tasks, need_mib, need_core) -> (memory ok, cores ok, slot ok)``.
share_parts_one = jit(_parts)


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
