"""``packing``: a share goes where it joins a best filling of the card's gap.

    loss  = what a share of ``s`` gives up in the gap ``h`` free on a card, in cards, at the
            cutting-stock prices of the workload's shares (``engine/fragmentation/prices.py``):
            ``K(h) - K(s) - K(h - s)``, 0 where ``s`` belongs to a best filling of ``h``
    score = 100 - 100 * loss      (loss is at most a card: 0..100)

FGD alone puts a 0.32 share in the 0.53 beside a 0.47, where the workload would put another 0.47,
rather than beside a 0.65. With weight 1 in the built-in profile a card of loss costs 100 points,
more than FGD's whole range: FGD decides among the cards where the share loses nothing. Rated per
card for one-card shares (0 everywhere for other replicas, and while the workload has no shares).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import ClassVar

import numpy as np

from xpupool.engine.context import Context
from xpupool.engine.fragmentation.measure import IndexArray
from xpupool.engine.scorers.base import ScorerEnv
from xpupool.engine.scorers.xpupool.plugin import WorkloadScorer
from xpupool.engine.state import FloatArray


class PackingLoss(WorkloadScorer):
    name: ClassVar[str] = "packing"

    def __init__(self, env: ScorerEnv) -> None:
        super().__init__(env)
        self.model.parts.append(self._describe)

    def _describe(self) -> str | None:
        prices = self.model.prices
        if prices is None:
            return None
        n = prices.sizes.size
        return f"shares priced by the best packing of {n} size{'s' if n > 1 else ''}"

    def card_key(self, ctx: Context) -> Hashable:
        return (self.model.generation, ctx.need_core)

    def card_scores(self, ctx: Context, nodes: IndexArray) -> FloatArray:
        prices = self.model.prices
        if prices is None or not 0 < ctx.need_core < 1000:
            return np.zeros((nodes.size, ctx.state.width), np.float64)
        loss = prices.loss(ctx.state.dev_core_free[nodes], ctx.need_core)
        result: FloatArray = 100.0 - 100.0 * loss
        return result
