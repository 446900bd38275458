"""Turn per-task series into the paper's curves: values binned by arrived workload, 0..130 %.

As the authors' analysis scripts do: each task event's arrived % is rounded half to even to an
integer; a bin's value is the mean over its events (falling back to the events of the neighbouring
bins when it has none); allocation and fragmentation are % of GPU capacity, fragmentation ratio is
fragment / idle. Unallocated % at arrived = 100 is ``100 - allocation[100]``.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from xpupool.sim.replay import ReplayTrace

BINS = 131  # arrived workload 0..130 %
FloatArray = npt.NDArray[np.float64]


def binned(arrived_pct: FloatArray, values: FloatArray, bins: int = BINS) -> FloatArray:
    """Mean of ``values`` per integer arrived-% bin (NaN where neither the bin nor a neighbour has
    an event)."""
    keys = np.round(arrived_pct).astype(np.int64)  # NumPy rounds half to even, like Python
    inside = (keys >= 0) & (keys < bins)
    sums = np.bincount(keys[inside], weights=values[inside], minlength=bins)[:bins]
    counts = np.bincount(keys[inside], minlength=bins)[:bins].astype(np.float64)
    out = np.full(bins, np.nan)
    have = counts > 0
    out[have] = sums[have] / counts[have]
    for b in np.flatnonzero(~have):
        lo, hi = max(b - 1, 0), min(b + 2, bins)
        if counts[lo:hi].sum() > 0:
            out[b] = sums[lo:hi].sum() / counts[lo:hi].sum()
    return out


def curves(trace: ReplayTrace) -> dict[str, FloatArray]:
    """``alloc_pct``, ``frag_amount_pct``, ``frag_ratio_pct`` per arrived-% bin."""
    cap = float(trace.capacity_milli)
    arrived: FloatArray = 100.0 * trace.arrived_milli.astype(np.float64) / cap
    alloc = _round2(100.0 * trace.placed_milli.astype(np.float64) / cap)
    frag: FloatArray = 100.0 * trace.frag_milli / cap
    idle = trace.idle_milli.astype(np.float64)
    ratio: FloatArray = np.zeros_like(idle)
    np.divide(100.0 * trace.frag_milli, idle, out=ratio, where=idle > 0)
    return {
        "alloc_pct": _round2(binned(arrived, alloc)),
        "frag_amount_pct": _round2(binned(arrived, frag)),
        "frag_ratio_pct": binned(arrived, _round2(ratio)),
    }


def _round2(values: FloatArray) -> FloatArray:
    """Two decimals, as the authors' logs and analysis print them."""
    return np.asarray(np.round(values, 2), dtype=np.float64)


def unallocated_at(alloc_pct: FloatArray, arrived: int = 100) -> float:
    return float(100.0 - alloc_pct[arrived])
