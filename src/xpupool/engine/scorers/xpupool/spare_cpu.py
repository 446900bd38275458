"""``spare-cpu``: a CPU-only replica goes where CPU is spare beyond what the idle devices will need.

    score = 100 * (spare - least spare) / (most spare - least spare)   over the candidates, with
            spare = free CPU - the workload's CPU per unit of device compute * idle compute

A CPU-only replica changes no node's device fragmentation, so FGD rates all nodes alike; this sends
it to the node with the most CPU beyond what its idle devices' future tasks will ask, except when
the workload is CPU-bound, where the fragmentation measure is CPU-capped and already weighs CPU
(0 everywhere then, and for replicas with devices). In the built-in profile its weight (0.005: at
most 0.5 points) keeps it below one step of the fragmentation delta.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from xpupool.engine.context import Context
from xpupool.engine.fragmentation.measure import IndexArray
from xpupool.engine.scorers.xpupool.plugin import WorkloadScorer
from xpupool.engine.state import FloatArray


class SpareCpu(WorkloadScorer):
    name: ClassVar[str] = "spare-cpu"

    def node_scores(self, ctx: Context, nodes: IndexArray) -> FloatArray:
        if ctx.k != 0 or self.model.frag.capped:
            return np.zeros(nodes.size, np.float64)
        state = ctx.state
        spare = (
            state.node_cpu_free[nodes]
            - self.model.cpu_per_compute * state.node_dev_core_free[nodes]
        )
        low, high = float(spare.min()), float(spare.max())
        if high <= low:
            return np.zeros(nodes.size, np.float64)
        result: FloatArray = 100.0 * ((spare - low) / (high - low))
        return result
