"""Per-node quantities shared by the FGD paper's baseline scorers (Weng et al., ATC'23, section 6).

The paper's simulator normalises CPU by the largest node CPU (128 cores) and GPU by the largest node
(8 GPUs = 8000 milli) of its cluster; here they are the cluster's own maxima, which are exactly those
figures on the paper's trace and keep the scores in 0..100 on any other cluster.
"""

from __future__ import annotations

from xpupool.engine.context import Context
from xpupool.engine.state import ClusterState, FloatArray


def max_cpu_milli(state: ClusterState) -> float:
    return float(max(int(state.node_cpu_total.max(initial=0)), 1))


def max_device_milli(state: ClusterState) -> float:
    return float(max(int(state.node_dev_core_total.max(initial=0)), 1))


def device_demand(ctx: Context) -> int:
    """Device compute the replica takes, in thousandths (num_gpu * gpu_milli)."""
    return ctx.k * ctx.need_core


def truncate(values: FloatArray) -> FloatArray:
    """Go's float-to-int conversion: toward zero."""
    result: FloatArray = values.astype("int64").astype("float64")
    return result
