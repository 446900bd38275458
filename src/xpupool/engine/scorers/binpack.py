"""Node binpack: prefer the node that will be fullest after this replica lands (kube's MostAllocated).

For device replicas the score is the mean of the node's allocated device-memory and device-compute
fractions after placement; for CPU-only replicas, the mean of CPU and host-memory fractions. Packing
keeps other nodes whole for large jobs later.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from xpupool.engine.context import Context
from xpupool.engine.state import FloatArray


def allocated_fraction_after(ctx: Context) -> FloatArray:
    """``[N]``: mean allocated fraction (0..1, may exceed 1 on nodes that do not fit) after placement."""
    s, k = ctx.state, ctx.k
    if k == 0:
        cpu = (s.node_cpu_total - s.node_cpu_free + ctx.req.cpu_milli) * s.inv_cpu_total
        mem = (s.node_mem_total - s.node_mem_free + ctx.req.memory_mib) * s.inv_mem_total
        result: FloatArray = 0.5 * (cpu + mem)
        return result
    if isinstance(ctx.need_mib, int):
        mem_need = (k * ctx.need_mib) * s.inv_dev_mem_total
    else:
        # A share of each card: k shares of an average card of this node.
        permille = ctx.req.devices.need_memory_permille or 0
        mem_need = (k * permille) * s.inv_dev_core_total
    mem = 1.0 - s.node_dev_mem_free * s.inv_dev_mem_total + mem_need
    core = 1.0 - (s.node_dev_core_free - k * ctx.need_core) * s.inv_dev_core_total
    result = 0.5 * (mem + core)
    return result


class NodeBinpack:
    name: ClassVar[str] = "binpack"

    def score(self, ctx: Context) -> FloatArray:
        # Up to 1 where the replica fits; the clip bounds what approximations of a share's memory
        # on cards of several sizes could carry past it.
        result: FloatArray = np.clip(100.0 * allocated_fraction_after(ctx), 0.0, 100.0)
        return result
