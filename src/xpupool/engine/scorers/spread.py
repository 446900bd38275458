"""Node spread: prefer the emptiest node after placement (kube's LeastAllocated); less contention."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from xpupool.engine.context import Context
from xpupool.engine.scorers.binpack import allocated_fraction_after
from xpupool.engine.state import FloatArray


class NodeSpread:
    name: ClassVar[str] = "spread"

    def score(self, ctx: Context) -> FloatArray:
        result: FloatArray = np.clip(100.0 * (1.0 - allocated_fraction_after(ctx)), 0.0, 100.0)
        return result
