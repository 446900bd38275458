"""Node spread: prefer the emptiest node after placement (kube's LeastAllocated); less contention."""

from __future__ import annotations

from typing import ClassVar

from xpupool.engine.context import Context
from xpupool.engine.scorers.binpack import SPREAD, allocated_fraction_after
from xpupool.engine.state import FloatArray


class NodeSpread:
    name: ClassVar[str] = "spread"

    def score(self, ctx: Context) -> FloatArray:
        return allocated_fraction_after(ctx, SPREAD)
