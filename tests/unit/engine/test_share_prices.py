"""Cutting-stock prices of a workload's shares (``engine/fragmentation/prices.py``), worked out by hand and
checked against the linear program solved over every packing pattern."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import linprog

from xpupool.engine.fragmentation.prices import CARD, MAX_SIZES, SharePrices
from xpupool.sim.packing_bound import packing_patterns


def test_prices_and_losses_worked_out_by_hand() -> None:
    # Shares of 0.5 and 0.3, three 0.3 for each 0.5. The best packing puts two 0.5 on a card and
    # three 0.3 on a card (1.5 cards per 0.5 + 3 x 0.3); 0.5 + 0.3 (0.8) is worse. Both patterns
    # are used, so the prices are unique: 2 y(500) = 1 and 3 y(300) = 1.
    prices = SharePrices({500: 1.0, 300: 3.0})
    assert prices.sizes.tolist() == [300, 500]
    assert prices.prices == pytest.approx([1 / 3, 1 / 2])
    k = prices.value
    assert k[CARD] == pytest.approx(1.0)
    assert k[500] == pytest.approx(1 / 2) and k[299] == 0.0
    assert k[800] == pytest.approx(1 / 2 + 1 / 3) and k[700] == pytest.approx(2 / 3)
    free = np.array([1000, 700, 400, 500, 700, 200])
    # a 0.3 on a whole card, beside another 0.3, or as the third: nothing lost; in the half
    # beside a 0.5 it leaves 0.2 where a 0.5 would have gone: 1/2 - 1/3 lost; no room: 0
    assert prices.loss(free, 300) == pytest.approx([0, 0, 0, 1 / 6, 0, 0], abs=1e-6)
    # a 0.5 beside a 0.3 spoils the three-0.3 card: 2/3 - 1/2
    assert prices.loss(np.array([1000, 500, 700]), 500) == pytest.approx([0, 0, 1 / 6], abs=1e-6)


def test_a_workload_without_shares_prices_nothing() -> None:
    prices = SharePrices({})
    assert not prices.active
    assert prices.value.max() == 0.0
    assert not SharePrices({1000: 1.0, 0: 2.0}).active  # whole cards and CPU-only are not shares


@pytest.mark.parametrize("seed", range(4))
def test_column_generation_reaches_the_optimum_of_every_pattern(seed: int) -> None:
    # Many sizes, so column generation starts far from the optimum: its prices must be dual
    # optimal for the LP over every pattern (enumerated here): no pattern worth more than a card,
    # and the workload's worth at those prices equals the fewest cards that hold it.
    rng = np.random.default_rng(seed)
    sizes = sorted({int(s) for s in rng.integers(12, 95, 9) * 10})
    frequencies = {s: float(f) for s, f in zip(sizes, rng.random(len(sizes)) + 0.1, strict=True)}
    prices = SharePrices(frequencies)
    patterns = np.asarray(packing_patterns(sizes), np.float64).T  # [sizes, patterns]
    demand = np.asarray([frequencies[s] for s in sizes])
    demand /= demand.sum()
    best = linprog(np.ones(patterns.shape[1]), A_eq=patterns, b_eq=demand, method="highs")
    assert (patterns.T @ prices.prices).max() <= 1.0 + 1e-7
    assert float(prices.prices @ demand) == pytest.approx(best.fun, abs=1e-7)
    assert prices.value[CARD] == pytest.approx(1.0)


def test_a_loss_is_never_negative() -> None:
    # K is superadditive (what fits in h - s and in s fits in h), so no placement gains.
    prices = SharePrices({810: 10.0, 470: 7.0, 650: 2.5, 320: 3.0, 230: 1.4, 160: 0.7})
    free = np.arange(CARD + 1)
    for size in (50, 160, 230, 320, 470, 555, 650, 810, 999):
        assert (prices.loss(free, size) >= 0).all()


@pytest.mark.slow
def test_hundreds_of_sizes_are_priced_on_a_coarser_grid() -> None:
    # A workload learned online may hold hundreds of share sizes; priced as they are, column
    # generation ran out of rounds (K(1000) 1.39: prices no packing respects). Rounded up to a
    # grid, at most MAX_SIZES are priced, the prices are optimal again, and any size has a loss.
    rng = np.random.default_rng(1)
    sizes = sorted({int(s) for s in rng.integers(1, 1000, 300)})
    weights = rng.random(len(sizes)) + 0.05
    prices = SharePrices({s: float(w) for s, w in zip(sizes, weights, strict=True)})
    assert 0 < prices.sizes.size <= MAX_SIZES
    assert set(prices.sizes.tolist()) <= set(range(5, CARD, 5))
    assert prices.value[CARD] == pytest.approx(1.0)  # no pattern worth more than a card
    free = np.arange(CARD + 1)
    assert all((prices.loss(free, s) >= 0).all() for s in sizes[::25])
