"""What xpupool's scorers have in common: a node score made from their card scores when they are
asked alone (``Engine.rate`` of a one-scorer profile), and the engine's shared workload model.

A scorer that rates cards gives a one-card replica's node the score of its best fitting card, as
the pipeline does for the weighted sum of several (``engine/card_scores.py``); a request for which
a scorer has nothing to tell apart scores 0 everywhere, a constant that changes no choice.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import ClassVar

import numpy as np

from xpupool.engine.context import Context
from xpupool.engine.fragmentation.measure import IndexArray
from xpupool.engine.fragmentation.workload_model import WorkloadModel
from xpupool.engine.scorers.base import ScorerEnv
from xpupool.engine.state import FloatArray


class CardRated:
    """Base of a scorer that may rate cards: :meth:`card_scores` for a one-card replica (None:
    rate nodes), :meth:`node_scores` otherwise."""

    name: ClassVar[str]

    def card_scores(self, ctx: Context, nodes: IndexArray) -> FloatArray | None:
        return None

    def card_key(self, ctx: Context) -> Hashable | None:
        return None

    def node_scores(self, ctx: Context, nodes: IndexArray) -> FloatArray:
        """``[S]`` for ``nodes`` (the candidates), when no card scores are given."""
        return np.zeros(nodes.size, np.float64)

    def score(self, ctx: Context) -> FloatArray:
        """``[N]``: :meth:`score_on` on the candidates, 0 elsewhere."""
        out = np.zeros(ctx.state.n_nodes, np.float64)
        candidates = ctx.candidates()
        if candidates.size:
            out[candidates] = self.score_on(ctx, candidates)
        return out

    def score_on(self, ctx: Context, nodes: IndexArray) -> FloatArray:
        """``[S]`` for ``nodes`` (the candidates): per node, its best fitting card's score for a
        one-card replica when the scorer rates cards, else :meth:`node_scores`."""
        cards = self.card_scores(ctx, nodes) if ctx.k == 1 else None
        if cards is not None:
            assert ctx.dev_fit is not None
            best: FloatArray = np.where(ctx.dev_fit[nodes], cards, -np.inf).max(axis=1)
            return best
        return self.node_scores(ctx, nodes)


class WorkloadScorer(CardRated):
    """A scorer built on the engine's shared :class:`WorkloadModel` (``ScorerEnv.model``)."""

    def __init__(self, env: ScorerEnv) -> None:
        if env.model is None:
            raise ValueError(f"the {self.name} scorer needs the engine's workload model")
        self.model: WorkloadModel = env.model()
