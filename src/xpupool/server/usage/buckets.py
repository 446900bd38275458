"""Split a stretch of use over the hour, day and month buckets it covers (pure; ``meter.py``
adds the parts to ``usage_rollups``). Buckets are UTC: an hour starts at a multiple of 3,600 s,
a day at a multiple of 86,400 s, a month at its first day's midnight, so a month's export reads
one row per label set, whatever the number of runs."""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import UTC, datetime

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


def month_start(t: float) -> float:
    """The start of the UTC month holding Unix time ``t``."""
    when = datetime.fromtimestamp(t, UTC)
    return datetime(when.year, when.month, 1, tzinfo=UTC).timestamp()


def next_month(t: float) -> float:
    """The start of the UTC month after the one holding ``t``."""
    when = datetime.fromtimestamp(t, UTC)
    year, month = (when.year + 1, 1) if when.month == 12 else (when.year, when.month + 1)
    return datetime(year, month, 1, tzinfo=UTC).timestamp()


def split_months(start: float, end: float) -> Iterator[tuple[float, float]]:
    """As :func:`split`, for calendar months."""
    if not end > start:
        return
    span = end - start
    bucket = month_start(start)
    while bucket < end:
        after = next_month(bucket)
        lo, hi = max(start, bucket), min(end, after)
        if hi > lo:
            yield bucket, (hi - lo) / span
        bucket = after


def spread(start: float, end: float) -> Iterator[tuple[str, float, float]]:
    """(step, bucket start, fraction) of [start, end) for every step the rollups keep."""
    for step, step_s in STEPS.items():
        for bucket, fraction in split(start, end, step_s):
            yield step, bucket, fraction
    for bucket, fraction in split_months(start, end):
        yield "month", bucket, fraction
