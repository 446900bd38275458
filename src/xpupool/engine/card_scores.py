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

from xpupool.engine.compiled import jit
from xpupool.engine.context import Context
from xpupool.engine.fragmentation.after import cache_bound
from xpupool.engine.lru import Lru
from xpupool.engine.scorers.base import CardScorer, Scorer
from xpupool.engine.state import BoolArray, ClusterState, FloatArray, IntArray

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
        kept = self._stable(ctx, scorers, stable, tuple(keys), candidates) if stable else None
        total: FloatArray | None = None
        used = set(stable)
        for i in rest:
            scorer, weight = scorers[i]
            part = cast(CardScorer, scorer).card_scores(ctx, candidates)
            if part is not None:
                used.add(i)
                if total is None:
                    total = part * weight if kept is None else kept[candidates] + part * weight
                else:
                    total = total + part * weight
        assert ctx.dev_fit is not None  # set for every replica that needs devices
        if total is not None:  # [S, W], a row per candidate
            values, rows = total, np.arange(candidates.size)
        elif kept is not None:  # the kept [N, W] sums, read in place
            values, rows = kept, candidates
        else:
            return None
        cards = np.full(ctx.state.n_nodes, -1, np.int64)
        best = np.empty(candidates.size, np.float64)
        _choose(values, rows, ctx.dev_fit, candidates, cards, best)
        ctx.cards = cards
        return CardChoice(best, frozenset(used))

    def _stable(
        self,
        ctx: Context,
        scorers: Weighted,
        stable: list[int],
        keys: tuple[Hashable, ...],
        candidates: IntArray,
    ) -> FloatArray:
        """``[N, W]`` the kept weighted sum of the node-local card scores, brought up to date on
        the candidates whose version moved (the other rows may be stale: read the candidates')."""
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
        return kept.total


def _choose_loop(
    values: FloatArray,
    rows: IntArray,
    fit: BoolArray,
    candidates: IntArray,
    cards: IntArray,
    best: FloatArray,
) -> None:
    """Per candidate ``i`` (node ``candidates[i]``, its sums in ``values[rows[i]]``): the first
    fitting card with the largest sum into ``cards[node]``, that sum into ``best[i]``; as
    ``np.argmax`` over the sums with the cards that do not fit at -inf (the first of equal sums, a
    NaN above every number), in one compiled pass instead of five array operations."""
    width = values.shape[1]
    for i in range(candidates.size):
        node = candidates[i]
        row = rows[i]
        top = values[row, 0] if fit[node, 0] else -np.inf
        col = 0
        for c in range(1, width):
            if top != top:  # a NaN: argmax keeps the first
                break
            v = values[row, c] if fit[node, c] else -np.inf
            if v != v or v > top:
                top = v
                col = c
        cards[node] = col
        best[i] = top


_choose = jit(_choose_loop)
