"""BestFit: prefer the node with the least CPU and device compute left after placement, equally
weighted and normalised by the cluster's largest node: ``trunc(100 * (1 - (0.5 cpu_left/cpu_max +
0.5 dev_left/dev_max)))`` (the FGD paper's baseline, ``best_fit_score.go``; its min-max rescaling
keeps the order and the ties, so it is left out).
"""

from __future__ import annotations

from typing import ClassVar

from xpupool.engine.context import Context
from xpupool.engine.scorers.paper_common import (
    device_demand,
    max_cpu_milli,
    max_device_milli,
    truncate,
)
from xpupool.engine.state import FloatArray


class BestFit:
    name: ClassVar[str] = "bestfit"

    def score(self, ctx: Context) -> FloatArray:
        s = ctx.state
        cpu_left = 0.5 * (s.node_cpu_free - ctx.req.cpu_milli) / max_cpu_milli(s)
        dev_left = 0.5 * (s.node_dev_core_free - device_demand(ctx)) / max_device_milli(s)
        return truncate(100.0 * (1.0 - (cpu_left + dev_left)))
