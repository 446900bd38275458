"""What the admission order's fair share from history starts from when a plane starts: each
tenant's dominant share of the pool held over the last hours, read from the stored hourly usage
rollups (issue 52), so that a restart does not wipe out who held the pool.

The order (``engine/cycle/fair_share.py``) counts a tenant's dominant share: the larger of its
share of the pool's device memory and of its compute (cards held, shares of a card counting as
what they hold). An hourly rollup has both sums for the hour: device-memory GiB-seconds and
card-seconds weighted by share. Over an hour the larger of the two integrals is at most the
integral of the larger share (equal when the same resource dominates all hour), so the seed can
count a tenant a little less than it held, never more. Each hour counts as held at its middle;
the pool's totals are today's. Hours older than ``HALF_LIVES`` half-lives are not read: they
would count for less than 0.1 % of themselves.
"""

from __future__ import annotations

from collections import defaultdict

from sqlalchemy import Connection, func, select

from xpupool.server.storage.usage import usage_rollups as t_rollups

HALF_LIVES = 10
HOUR_S = 3600.0


def held_by_tenant(
    conn: Connection, now: float, half_life_s: float, memory_gib: float, devices: float
) -> dict[str, list[tuple[float, float]]]:
    """Per tenant, ``(dominant share-seconds, the hour's middle)`` of each stored hour of the
    last ``HALF_LIVES`` half-lives, against a pool of ``memory_gib`` device memory and
    ``devices`` cards (a pool with neither: nothing)."""
    if memory_gib <= 0 and devices <= 0:
        return {}
    r = t_rollups
    rows = conn.execute(
        select(r.c.tenant, r.c.bucket, func.sum(r.c.gib_seconds), func.sum(r.c.device_seconds))
        .where(r.c.step == "hour", r.c.bucket >= now - HALF_LIVES * half_life_s - HOUR_S)
        .group_by(r.c.tenant, r.c.bucket)
    )
    out: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for tenant, bucket, gib_s, card_s in rows:
        memory = float(gib_s or 0.0) / memory_gib if memory_gib > 0 else 0.0
        compute = float(card_s or 0.0) / devices if devices > 0 else 0.0
        held = max(memory, compute)
        if held > 0:
            out[str(tenant)].append((held, float(bucket) + HOUR_S / 2))
    return dict(out)
