"""``fullest-card``: among cards otherwise equal, the one the replica leaves fullest.

    score = 100 * (1 - free compute left on the card after placement / 1000)     0..100

Rated per card for one-card replicas (0 everywhere for others). In the built-in profile its weight
(0.0001: at most 0.01 points) keeps it below one step of the half-resolution fragmentation delta,
so it decides only among cards that delta cannot tell apart: whole cards stay whole for the whole-card
tasks to come.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import ClassVar

from xpupool.engine.context import Context
from xpupool.engine.fragmentation.measure import IndexArray
from xpupool.engine.scorers.xpupool.plugin import CardRated
from xpupool.engine.state import FloatArray


class FullestCard(CardRated):
    name: ClassVar[str] = "fullest-card"

    def card_key(self, ctx: Context) -> Hashable:
        return ctx.need_core

    def card_scores(self, ctx: Context, nodes: IndexArray) -> FloatArray:
        left = ctx.state.dev_core_free[nodes] - ctx.need_core
        result: FloatArray = 100.0 * (1.0 - left / 1000.0)
        return result
