"""Fair share from history: each tenant's share of the pool held over a decaying window, the
admission order's alternative to DRF on what is held now (issue 52).

DRF orders by what each tenant holds at this instant, so a tenant that held the pool all night
and just released it ranks level with one that never ran, and a bursty tenant wins every gap
between its bursts. Kueue's admission fair sharing and KAI's time-based fair share order by
usage over a window instead; here the window decays exponentially with a half-life ``H``:

    U(t) = integral over s <= t of share(s) x 2^(-(t - s) / H) ds,   shown as U(t) x ln 2 / H

so a tenant that has held a steady share ``x`` for much longer than ``H`` shows ``x``, and what
it held ``H`` ago counts half. ``share`` is the tenant's dominant share of the pool (its largest
share of device memory or compute, as DRF's, before its weight). Between two changes of what is
held the share is constant, so the integral advances exactly, in closed form: the owner calls
:meth:`DecayedUsage.advance` with the shares held since the last call before every change
(``Admission`` does, before each charge and release, and before it orders). Pure: time is given.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from enum import StrEnum


class FairShare(StrEnum):
    """What the admission order compares tenants by (then priority, then age)."""

    DRF = "drf"  # the dominant share held now, divided by weight
    HISTORY = "history"  # the dominant share held over a decaying window, divided by weight


class DecayedUsage:
    """Per tenant, the decayed integral of its dominant share (see the module docstring)."""

    def __init__(self, half_life_s: float) -> None:
        if not math.isfinite(half_life_s) or half_life_s <= 0:
            raise ValueError(f"half-life must be above 0 s, got {half_life_s!r}")
        self.half_life_s = half_life_s
        self._rate = math.log(2) / half_life_s
        self._usage: dict[str, float] = {}  # share-seconds, decayed to ``_at``
        self._at: float | None = None

    def advance(self, now: float, held: Mapping[str, float]) -> None:
        """Count ``held`` (tenant -> dominant share, 0..1) as held from the last call to
        ``now``; a clock that goes back counts nothing (and decays nothing)."""
        if self._at is None:
            self._at = now
            return
        dt = now - self._at
        if dt <= 0:
            return
        keep = math.exp(-self._rate * dt)
        gain = (1.0 - keep) / self._rate  # the integral of the decay over the step
        for tenant in self._usage:
            self._usage[tenant] *= keep
        for tenant, share in held.items():
            if share > 0:
                self._usage[tenant] = self._usage.get(tenant, 0.0) + share * gain
        self._at = now

    def seed(self, now: float, spans: Mapping[str, list[tuple[float, float]]]) -> None:
        """Start from history (a plane starting, ``server/usage/fair_share_seed.py``): per
        tenant, ``(share-seconds, when)`` already held, each decayed from ``when`` to ``now``;
        counting goes on from ``now``. Before any :meth:`advance`: what was counted is replaced."""
        self._usage = {}
        for tenant, held in spans.items():
            total = sum(amount * math.exp(-self._rate * max(now - at, 0.0)) for amount, at in held)
            if total > 0:
                self._usage[tenant] = total
        self._at = now

    def shares(self) -> dict[str, float]:
        """Per tenant, its decayed mean share (0..1): ``U x ln 2 / H``."""
        return {tenant: u * self._rate for tenant, u in self._usage.items()}
