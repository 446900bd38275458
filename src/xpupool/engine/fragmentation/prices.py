"""What a card's free compute is worth to the shares the workload will bring: cutting-stock prices.

Why: whether a share should join a partly used card or break a whole one is a bin-packing question,
and the workload answers it. Pack the workload's one-card shares (compute in thousandths of a card,
with their frequencies) into as few cards as possible, as a linear program over packing patterns
(multisets of share sizes that fit one card). Its dual gives each share size a price ``y_s``: the
part of a card that size is worth when the workload is packed best; every pattern is worth at most
one card, and the patterns of a best packing exactly one. Then

    K(h)      = the most a free ``h`` can hold:  max sum_s c_s y_s  over  sum_s c_s s <= h
    loss(h,s) = K(h) - K(s) - K(h - s)    >= 0

is what placing a share of ``s`` on a card with ``h`` free gives up, in cards: zero when ``s`` is part
of a best filling of ``h`` (a 0.32 beside a 0.65, two 0.47 together), positive when it spoils the
gap (a 0.32 in the 0.53 beside a 0.47, which leaves 0.21 that no share of the workload fills
as well). ``K(s)`` stands for the share's own price, so sizes the workload does not hold are priced
as what they displace. Everything comes from the workload the policy sees: no constant of a trace.

The LP is solved by column generation (a knapsack over the prices finds the pattern worth most; it
joins the program until none is worth more than one card), so workloads with many small sizes do
not enumerate every pattern; past ``MAX_SIZES`` sizes they are rounded up to a coarser grid.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from xpupool.engine.fragmentation.kernels import knapsack
from xpupool.engine.state import FloatArray, IntArray

CARD = 1000  # thousandths of a card
MAX_SIZES = 40  # sizes priced; more are rounded up to a coarser grid (see ``_coarsened``)
GRIDS = (5, 10, 20, 25, 50)  # thousandths: the grids tried, finest first
MAX_ROUNDS = 200  # column generation rounds (a few dozen suffice for MAX_SIZES sizes)
TOLERANCE = 1e-9


class SharePrices:
    """``K(h)`` for ``h = 0..1000`` from the share sizes and frequencies of a workload."""

    def __init__(self, frequencies: Mapping[int, float]) -> None:
        merged = _coarsened({s: f for s, f in frequencies.items() if 0 < s < CARD and f > 0})
        sizes = sorted(merged)
        self.sizes: IntArray = np.asarray(sizes, np.int64)
        self.prices: FloatArray = _dual_prices(self.sizes, [merged[s] for s in sizes])
        self.value: FloatArray = _knapsack(self.sizes, self.prices)  # K(h), h = 0..CARD

    @property
    def active(self) -> bool:
        """Are there shares to price (a workload with one-card shares)?"""
        return bool(self.sizes.size)

    def loss(self, free: IntArray, size: int) -> FloatArray:
        """``loss(h, size)`` for every ``h`` in ``free`` (thousandths; cards without room give 0,
        the filters exclude them anyway)."""
        k = self.value
        # np.minimum/np.maximum, not np.clip: the same integers at a third of the call's cost.
        h = np.minimum(np.maximum(free, 0), CARD)
        after = np.minimum(np.maximum(h - size, 0), CARD)
        result = np.where(h >= size, k[h] - k[min(max(size, 0), CARD)] - k[after], 0.0)
        # Settled: prices like 1/3 leave float noise where a filling loses nothing, and equal
        # losses must compare equal (the smallest real loss is a difference of prices, >> 1e-6).
        settled: FloatArray = np.maximum(np.round(result, 6), 0.0)
        return settled


def _coarsened(frequencies: dict[int, float]) -> dict[int, float]:
    """At most ``MAX_SIZES`` sizes: a workload learned online can hold hundreds of share sizes,
    and column generation then takes seconds and hundreds of rounds. Sizes are rounded up to the
    finest grid of ``GRIDS`` that leaves few enough (a share then needs at most its priced size);
    one that rounds up to a whole card is no share to price."""
    if len(frequencies) <= MAX_SIZES:
        return frequencies
    for grid in GRIDS:
        merged: dict[int, float] = {}
        for size, weight in frequencies.items():
            up = -(-size // grid) * grid
            if up < CARD:
                merged[up] = merged.get(up, 0.0) + weight
        if len(merged) <= MAX_SIZES:
            break
    return merged


def _dual_prices(sizes: IntArray, counts: list[float]) -> FloatArray:
    """Dual prices of ``min sum x_p  s.t.  sum_p c_sp x_p = counts_s, x >= 0`` (cards to hold the
    workload's shares), by column generation from the one-size patterns."""
    if not sizes.size:
        return np.zeros(0)
    from scipy.optimize import linprog  # slow to import: only where there are shares to price

    demand = np.asarray(counts, np.float64)
    demand = demand / demand.sum()
    columns = [np.eye(sizes.size, dtype=np.float64)[i] * (CARD // s) for i, s in enumerate(sizes)]
    prices = np.zeros(sizes.size)
    for _ in range(MAX_ROUNDS):
        result = linprog(
            np.ones(len(columns)),
            A_eq=np.column_stack(columns),
            b_eq=demand,
            bounds=(0, None),
            method="highs",
        )
        if not result.success:  # pragma: no cover - the one-size columns are always feasible
            raise RuntimeError(f"share prices: LP failed: {result.message}")
        prices = np.asarray(result.eqlin.marginals, np.float64)
        pattern, worth = _best_pattern(sizes, prices)
        if worth <= 1.0 + TOLERANCE:
            break
        columns.append(pattern)
    return prices


def _best_pattern(sizes: IntArray, prices: FloatArray) -> tuple[FloatArray, float]:
    """The multiset of sizes fitting one card worth most at ``prices`` (unbounded knapsack, a
    compiled loop: ``kernels.knapsack``)."""
    value, last = knapsack(sizes, prices, CARD)
    pattern = np.zeros(sizes.size)
    h = CARD
    while h > 0:
        if last[h] < 0:
            h -= 1
            continue
        pattern[last[h]] += 1
        h -= int(sizes[last[h]])
    return pattern, float(value[CARD])


def _knapsack(sizes: IntArray, prices: FloatArray) -> FloatArray:
    """``K(h)``: the most the sizes fitting in ``h`` are worth at ``prices``, ``h = 0..CARD``
    (negative prices, which a degenerate dual can give, count as nothing)."""
    value, _ = knapsack(sizes, np.maximum(prices, 0.0), CARD)
    return np.round(value, 9)
