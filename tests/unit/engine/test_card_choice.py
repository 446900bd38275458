"""The compiled card choice of one-card replicas (``card_scores._choose``) is NumPy's: per
candidate, ``np.argmax`` over its cards' sums with the cards that do not fit at -inf, and that
card's sum; ties go to the first card, a NaN wins as ``argmax`` lets it."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xpupool.engine.card_scores import _choose, _choose_loop

VALUES = st.sampled_from([-np.inf, -1.0, 0.0, 0.5, 1.0, 2.0, 98.0, np.inf, np.nan])


def numpy_choice(
    values: np.ndarray, rows: np.ndarray, fit: np.ndarray, candidates: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    per_card = np.where(fit[candidates], values[rows], -np.inf)
    best = np.argmax(per_card, axis=1)
    cards = np.full(fit.shape[0], -1, np.int64)
    cards[candidates] = best
    return cards, per_card[np.arange(candidates.size), best]


@settings(max_examples=300, deadline=None)
@given(
    st.integers(1, 6),
    st.integers(1, 5),
    st.data(),
)
@pytest.mark.slow
def test_the_compiled_choice_is_numpys(nodes: int, width: int, data: st.DataObject) -> None:
    flat = data.draw(st.lists(VALUES, min_size=nodes * width, max_size=nodes * width))
    values = np.asarray(flat, np.float64).reshape(nodes, width)
    fit = np.asarray(
        data.draw(st.lists(st.booleans(), min_size=nodes * width, max_size=nodes * width))
    ).reshape(nodes, width)
    candidates = np.asarray(
        sorted(data.draw(st.sets(st.integers(0, nodes - 1), min_size=1))), np.int64
    )
    in_place = data.draw(st.booleans())  # the kept [N, W] sums, or a row per candidate
    rows = candidates if in_place else np.arange(candidates.size)
    if not in_place:
        values = values[: candidates.size]
    want_cards, want_best = numpy_choice(values, rows, fit, candidates)
    for choose in (_choose, _choose_loop):
        cards = np.full(nodes, -1, np.int64)
        best = np.empty(candidates.size, np.float64)
        choose(values, rows, fit, candidates, cards, best)
        assert np.array_equal(cards, want_cards)
        assert np.array_equal(best, want_best, equal_nan=True)


@settings(max_examples=400, deadline=None)
@given(st.data(), st.integers(1, 12))
@pytest.mark.slow
def test_the_lookaheads_nearest_are_the_first_of_a_full_sort(
    data: st.DataObject, size: int
) -> None:
    """``lookahead._nearest`` keeps the best ``size`` of the pool in one pass: the same first
    ``size`` as a stable sort of the whole pool (total down, then rank), signed zeros, infinities
    and NaNs included; compiled and as Python."""
    from xpupool.engine.scorers.xpupool.lookahead import _nearest, _top_loop

    nodes = data.draw(st.integers(1, 40))
    rank = np.asarray(data.draw(st.permutations(range(nodes))), np.int64)
    pool = np.asarray(
        data.draw(st.lists(st.integers(0, nodes - 1), min_size=1, unique=True)), np.int64
    )  # a subset of the nodes, in any order
    totals = np.asarray(
        data.draw(st.lists(VALUES | st.just(-0.0), min_size=pool.size, max_size=pool.size)),
        np.float64,
    )
    want = pool[np.lexsort((rank[pool], -totals))][:size]
    assert np.array_equal(_nearest(pool, totals, rank, size), want)
    if not np.isnan(totals).any():
        chosen = np.empty(min(size, pool.size), np.int64)
        _top_loop(pool, totals, rank, chosen)
        assert np.array_equal(chosen, want)
