"""Card scores: how a profile rates the cards of each node for a one-card replica.

Scorers that rate cards (``scorers/base.py`` :class:`CardScorer`) give ``[S, W]`` scores; the
weighted sum per card, in the profile's order, decides the node's card (the first best fitting
column, as ``np.argmax``) and that card's sum is the node's share of the weighted total; the engine
then places the replica on it. Scores that depend only on a node's own state (a scorer's
``card_key``) are summed once and kept per profile and key, recomputed only for nodes whose
version moved: most placements change one node, and a stream of requests asks a few hundred
distinct amounts, so a request gathers one kept ``[S, W]`` array instead of recomputing each
scorer's.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import cast

import numpy as np

from xpupool.engine.context import Context
from xpupool.engine.fragmentation.after import cache_bound
from xpupool.engine.lru import Lru
from xpupool.engine.scorers.base import CardScorer, Scorer
from xpupool.engine.state import ClusterState, FloatArray, IntArray

Weighted = tuple[tuple[Scorer, float], ...]
POSITIONS_BOUND = 64


@dataclass(slots=True)
class _Kept:
    """A profile's weighted sum of node-local card scores for one key: ``[N, W]``, and the
    ``node_version`` each row was computed at (-1: never)."""

    total: FloatArray
    version: IntArray


@dataclass(frozen=True, slots=True)
class CardChoice:
    """Per candidate its best card's weighted sum (``[S]``), and the profile's scorers (by
    position) whose scores it holds: the others rate the nodes."""

    best: FloatArray
    used: frozenset[int]


class CardScores:
    """Kept sums of card scores for one :class:`ClusterState` (bounded like FGD's cache)."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self.kept: Lru[tuple[Hashable, ...], _Kept] = Lru(cache_bound(state))
        # Which of a profile's scorers rate cards, by its weighted scorers (a protocol check
        # costs microseconds; a request would pay it per scorer): one entry per profile in use.
        self.positions: Lru[Weighted, tuple[int, ...]] = Lru(POSITIONS_BOUND)

    def choose(self, ctx: Context, scorers: Weighted, candidates: IntArray) -> CardChoice | None:
        """The cards a one-card replica would take on ``candidates`` (set in ``ctx.cards``) and
        their sums; None when no scorer rates cards for this request."""
        if ctx.k != 1 or not candidates.size:
            return None
        positions = self.positions.get(scorers)
        if positions is None:
            positions = self.positions.put(
                scorers, tuple(i for i, (s, _) in enumerate(scorers) if isinstance(s, CardScorer))
            )
        stable: list[int] = []
        keys: list[Hashable] = []
        rest: list[int] = []
        for i in positions:
            key = cast(CardScorer, scorers[i][0]).card_key(ctx)
            if key is None:
                rest.append(i)
            else:
                stable.append(i)
                keys.append(key)
        if not stable and not rest:
            return None
        total = self._stable(ctx, scorers, stable, tuple(keys), candidates) if stable else None
        used = set(stable)
        for i in rest:
            scorer, weight = scorers[i]
            part = cast(CardScorer, scorer).card_scores(ctx, candidates)
            if part is not None:
                used.add(i)
                total = part * weight if total is None else total + part * weight
        if total is None:
            return None
        assert ctx.dev_fit is not None  # set for every replica that needs devices
        per_card = np.where(ctx.dev_fit[candidates], total, -np.inf)
        best = np.argmax(per_card, axis=1)
        cards = np.full(ctx.state.n_nodes, -1, np.int64)
        cards[candidates] = best
        ctx.cards = cards
        return CardChoice(per_card[np.arange(candidates.size), best], frozenset(used))

    def _stable(
        self,
        ctx: Context,
        scorers: Weighted,
        stable: list[int],
        keys: tuple[Hashable, ...],
        candidates: IntArray,
    ) -> FloatArray:
        """``[S, W]`` the kept weighted sum of the node-local card scores, brought up to date on
        the candidates whose version moved."""
        state = ctx.state
        parts = tuple(scorers[i] for i in stable)
        key = (parts, keys, state.epoch)
        kept = self.kept.get(key)
        if kept is None:
            n, w = state.dev_present.shape
            kept = self.kept.put(key, _Kept(np.zeros((n, w)), np.full(n, -1, np.int64)))
        stale = candidates[kept.version[candidates] != state.node_version[candidates]]
        if stale.size:
            total: FloatArray | None = None
            for scorer, weight in parts:
                part = cast(CardScorer, scorer).card_scores(ctx, stale)
                assert part is not None, f"{scorer.name} gave a card key but no card scores"
                total = part * weight if total is None else total + part * weight
            assert total is not None
            kept.total[stale] = total
            kept.version[stale] = state.node_version[stale]
        result: FloatArray = kept.total[candidates]
        return result
