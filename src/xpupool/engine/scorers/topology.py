"""Topology: for a multi-device replica, prefer nodes where all its devices fit in one link group
(one NUMA node for a ``same-numa`` replica, whose filter already demands it).

100 when one NVLink/HCCS domain on the node can hold every device, otherwise proportional to the
largest part that can. For single-device and CPU-only replicas it has no preference and says so
(None: skipped, as kube's PreScore Skip), which costs nothing.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from xpupool.engine.context import Context
from xpupool.engine.state import FloatArray
from xpupool.engine.topology import best_group_count


class Topology:
    name: ClassVar[str] = "topology"

    def score(self, ctx: Context) -> FloatArray | None:
        if ctx.k <= 1 or ctx.dev_fit is None:
            return None
        best = (
            ctx.group_best
            if ctx.group_best is not None
            else best_group_count(ctx.state, ctx.dev_fit, ctx.req.devices.topology)
        )
        ctx.group_best = best
        result: FloatArray = 100.0 * np.minimum(best, ctx.k) / ctx.k
        return result
