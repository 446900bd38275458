"""Node binpack: prefer the node that will be fullest after this replica lands (kube's MostAllocated).

For device replicas the score is the mean of the node's allocated device-memory and device-compute
fractions after placement; for CPU-only replicas, the mean of CPU and host-memory fractions. Packing
keeps other nodes whole for large jobs later.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from xpupool.engine.compiled import jit
from xpupool.engine.context import Context
from xpupool.engine.state import FloatArray

# What :func:`allocated_fraction_after` returns: the fraction itself, or the binpack or spread
# score made from it (``clip(100 * f)``, ``clip(100 * (1 - f))`` into 0..100).
FRACTION, BINPACK, SPREAD = 0, 1, 2


def allocated_fraction_after(ctx: Context, mode: int = FRACTION) -> FloatArray:
    """``[N]``: mean allocated fraction (0..1, may exceed 1 on nodes that do not fit) after
    placement, or the score ``mode`` makes of it in the same pass."""
    s, k = ctx.state, ctx.k
    if k == 0:
        cpu = (s.node_cpu_total - s.node_cpu_free + ctx.req.cpu_milli) * s.inv_cpu_total
        mem = (s.node_mem_total - s.node_mem_free + ctx.req.memory_mib) * s.inv_mem_total
        result: FloatArray = 0.5 * (cpu + mem)
        if mode == BINPACK:
            result = np.clip(100.0 * result, 0.0, 100.0)
        elif mode == SPREAD:
            result = np.clip(100.0 * (1.0 - result), 0.0, 100.0)
        return result
    result = np.empty(s.n_nodes, np.float64)
    if isinstance(ctx.need_mib, int):
        _device_fraction_after(
            s.node_dev_mem_free, s.inv_dev_mem_total, s.node_dev_core_free, s.inv_dev_core_total,
            k * ctx.need_mib, s.inv_dev_mem_total, k * ctx.need_core, mode, result,
        )  # fmt: skip
    else:
        # A share of each card: k shares of an average card of this node.
        permille = ctx.req.devices.need_memory_permille or 0
        _device_fraction_after(
            s.node_dev_mem_free, s.inv_dev_mem_total, s.node_dev_core_free, s.inv_dev_core_total,
            k * permille, s.inv_dev_core_total, k * ctx.need_core, mode, result,
        )  # fmt: skip
    return result


def _device_fraction_after_loop(
    mem_free: Any,
    inv_mem: Any,
    core_free: Any,
    inv_core: Any,
    mem_need: Any,
    inv_need: Any,
    core_need: Any,
    mode: Any,
    out: Any,
) -> None:
    """Per node, ``0.5 * (memory fraction + compute fraction)`` allocated after ``mem_need``
    (over ``inv_need``) and ``core_need`` land, or the score ``mode`` makes of it: the NumPy
    expressions evaluated in the same order, so the floats are the same bits, in one compiled
    pass instead of a dozen array operations."""
    for n in range(out.size):
        mem = 1.0 - mem_free[n] * inv_mem[n] + mem_need * inv_need[n]
        core = 1.0 - (core_free[n] - core_need) * inv_core[n]
        fraction = 0.5 * (mem + core)
        if mode == FRACTION:
            out[n] = fraction
        else:
            score = 100.0 * fraction if mode == BINPACK else 100.0 * (1.0 - fraction)
            out[n] = min(max(score, 0.0), 100.0)


_device_fraction_after = jit(_device_fraction_after_loop)


class NodeBinpack:
    name: ClassVar[str] = "binpack"

    def score(self, ctx: Context) -> FloatArray:
        # Up to 1 where the replica fits; the clip bounds what approximations of a share's memory
        # on cards of several sizes could carry past it.
        return allocated_fraction_after(ctx, BINPACK)
