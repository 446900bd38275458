"""Split a stretch of use over the hour and day buckets it covers (pure; ``meter.py`` adds the
parts to ``usage_rollups``). Buckets are UTC: an hour starts at a multiple of 3,600 s, a day at a
multiple of 86,400 s, so a month's export is the sum of its days without a remainder."""

from __future__ import annotations

import math
from collections.abc import Iterator

STEPS: dict[str, float] = {"hour": 3600.0, "day": 86400.0}


def split(start: float, end: float, step_s: float) -> Iterator[tuple[float, float]]:
    """(bucket start, fraction of [start, end) inside it) for each bucket the stretch touches;
    the fractions add up to 1. Nothing for an empty or reversed stretch."""
    if not end > start:
        return
    span = end - start
    bucket = math.floor(start / step_s) * step_s
    while bucket < end:
        lo, hi = max(start, bucket), min(end, bucket + step_s)
        if hi > lo:
            yield bucket, (hi - lo) / span
        bucket += step_s
