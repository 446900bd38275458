"""``contention``: contended cards priced, so that jobs that could run anywhere leave the cards
that constrained jobs need.

    displaced = contended demand the replica takes: ``c * min(1, rho(d) - rho_min)`` per card,
                ``rho`` the card's pressure (``engine/fragmentation/pressure.py``), ``rho_min``
                the least over the cards it fits, ``c`` its compute per card
    score     = 100 - k * displaced / 256      (k cards; 0..100 up to 25 fully contended cards,
                0 beyond)

FGD alone happily spends the cards that jobs constrained to them need, because idle capacity
others cannot use looks like fragment to it. The built-in weight, 6.4, makes a thousandth of
displaced demand cost 0.025 points: FGD's sigmoid's slope at 0, so displaced demand counts as
that much more fragment. Per card for a one-card replica on nodes with cards of several classes,
per node otherwise (a node's least contended fitting cards); 0 everywhere when nothing is contended.
The pressure depends on the whole fleet, so the scores are computed for every request.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from xpupool.engine.context import Context
from xpupool.engine.fragmentation.measure import IndexArray
from xpupool.engine.scorers.xpupool.plugin import WorkloadScorer
from xpupool.engine.state import FloatArray

SCALE = 256.0  # thousandths of displaced demand per score point (a power of two: exact)


class Contention(WorkloadScorer):
    name: ClassVar[str] = "contention"

    def card_scores(self, ctx: Context, nodes: IndexArray) -> FloatArray | None:
        displaced = self.model.displaced(ctx) if ctx.k == 1 else None
        if displaced is None or displaced.ndim == 1:
            return None
        assert displaced.shape[0] == nodes.size  # the candidates, as the model computed them
        result: FloatArray = 100.0 - displaced / SCALE
        return result

    def node_scores(self, ctx: Context, nodes: IndexArray) -> FloatArray:
        displaced = self.model.displaced(ctx)
        if displaced is None:
            return np.zeros(nodes.size, np.float64)
        if displaced.ndim == 2:  # per card: a node's least contended fitting cards
            assert ctx.dev_fit is not None  # set for every replica that needs devices
            displaced = np.where(ctx.dev_fit[nodes], displaced, np.inf).min(axis=1)
        result: FloatArray = np.maximum(100.0 - ctx.k * displaced / SCALE, 0.0)
        return result
