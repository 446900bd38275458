"""Runs stopped for being idle (issue 54 part 5): a job that asks ``idle_stop=5%/30m`` is stopped
once every card it holds whole has read under 5 % utilisation, without a break, for 30 minutes,
as dstack's ``utilization_policy`` stops idle runs. The agents' live readings drive it (the
heartbeats' metrics, ``server/live_metrics.py``).

What counts as idle, and why so strictly: only a fresh reading below the threshold on every
card of the run; a card read busy, a missing or stale reading (its agent went quiet, its probe
reads no utilisation), or a card the run holds only a share of (the card's utilisation is every
sharer's, so it says nothing of this job) breaks the idle time, which starts again at the next
idle reading. A run is never stopped on what was not read. The idle time is kept in memory: a
restarted plane starts counting again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol

from xpupool.model.allocation import Allocation
from xpupool.model.stopping import IdleStop, format_duration
from xpupool.server.live_metrics import STALE_AFTER_S, Reading
from xpupool.server.schemas.jobs import JobPhase

WHOLE = 1000  # a card's compute in permille: held whole


class Run(Protocol):
    """What of a held job (``server/plane/records.py`` ``HeldJob``) this module reads and sets."""

    idle_since: float | None  # set here

    @property
    def id(self) -> int: ...

    @property
    def state(self) -> JobPhase: ...

    @property
    def stop(self) -> object | None: ...

    @property
    def allocations(self) -> list[Allocation]: ...

    @property
    def idle_stop(self) -> IdleStop | None: ...


def idle_runs(
    held: Iterable[Run], last_reading: Callable[[str], Reading | None], now: float
) -> list[tuple[int, str]]:
    """(job, reason) of every running job whose cards stayed idle as long as it asked, not being
    stopped yet; each job's idle time is brought up to ``now`` on the way. Under the plane's lock.
    """
    out: list[tuple[int, str]] = []
    for job in held:
        rule = job.idle_stop
        if rule is None or job.state is not JobPhase.RUNNING or job.stop is not None:
            continue
        busiest = _busiest(job.allocations, last_reading, now)
        if busiest is None or busiest >= rule.below_pct:
            job.idle_since = None
            continue
        if job.idle_since is None:
            job.idle_since = now
        elif now - job.idle_since >= rule.for_s:
            cards = sum(len(a.devices) for a in job.allocations)
            out.append(
                (
                    job.id,
                    f"idle: its {cards} card(s) stayed under {rule.below_pct:g}% utilisation "
                    f"for {format_duration(rule.for_s)} (idle_stop={rule.text()})",
                )
            )
    return out


def _busiest(
    allocations: list[Allocation], last_reading: Callable[[str], Reading | None], now: float
) -> float | None:
    """The highest fresh utilisation among the run's cards; None when any card is held only in
    part, has no fresh reading, or reads none (nothing can be said), or when it holds no card."""
    busiest: float | None = None
    for alloc in allocations:
        for share in alloc.devices:
            if share.core_permille < WHOLE:
                return None
            reading = last_reading(share.uuid)
            if reading is None or reading.util_pct is None or now - reading.t > STALE_AFTER_S:
                return None
            busiest = reading.util_pct if busiest is None else max(busiest, reading.util_pct)
    return busiest
