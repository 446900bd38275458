"""DotProd (Tetris-style): prefer the node whose free (CPU, device) vector points least along the
replica's demand. ``trunc(100 * (1 - node_free . demand / 2))`` with both vectors normalised by the
cluster's largest node (the FGD paper's baseline, ``dot_product_score.go``, merged device dimension).
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


class DotProduct:
    name: ClassVar[str] = "dotprod"

    def score(self, ctx: Context) -> FloatArray:
        s = ctx.state
        cpu_max, dev_max = max_cpu_milli(s), max_device_milli(s)
        dot = (s.node_cpu_free / cpu_max) * (ctx.req.cpu_milli / cpu_max) + (
            s.node_dev_core_free / dev_max
        ) * (device_demand(ctx) / dev_max)
        return truncate(100.0 * (1.0 - dot / 2.0))
