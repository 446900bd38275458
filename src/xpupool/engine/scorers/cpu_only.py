"""CPU-only work stays off accelerator nodes: for a request that asks for no device, nodes without
devices score 100 and nodes with devices 0, so a free CPU-only node is taken before a GPU node's
CPU is, and the cards keep their host's CPU and memory for the work that needs them.

It has something to say only for a request without devices whose candidates include both kinds
of node; otherwise (every request on a pool whose nodes all have cards, as the FGD traces') it is
skipped (None), and placements are exactly those of the profile's other scorers. It scores whole
nodes only (no ``score_on``): a profile of node scorers alone (binpack) keeps its cheaper sum over
every node (``Pipeline.weighted``).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from xpupool.engine.context import Context
from xpupool.engine.scorers.base import MAX_SCORE, MIN_SCORE
from xpupool.engine.state import BoolArray, FloatArray


class CpuOnly:
    name: ClassVar[str] = "cpu-only"

    def score(self, ctx: Context) -> FloatArray | None:
        if not self._applies(ctx):
            return None
        bare = ctx.state.node_no_devices
        fit = ctx.node_fit
        if not (bare & fit).any() or (bare | ~fit).all():
            return None
        return _scores(bare)

    @staticmethod
    def _applies(ctx: Context) -> bool:
        return ctx.k == 0 and ctx.state.mixed_devices


def _scores(bare: BoolArray) -> FloatArray:
    result: FloatArray = np.where(bare, MAX_SCORE, MIN_SCORE)
    return result
