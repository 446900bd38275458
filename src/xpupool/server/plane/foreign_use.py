"""Cards the plane's engine holds for work that is no job of the plane's (issue 49, "foreign use").

On a Kubernetes site, pods the plane did not create (another scheduler's, a HAMi user's outside
the plane's queues, a system pod's) hold cards too. Counted as free, the plane would admit jobs
onto them that then wait in the cluster. So each site says what its nodes hold for such work
(:meth:`~xpupool.server.sites.protocol.Site.foreign`, by holder: ``pod NAMESPACE/NAME``), and
the plane charges it to its engine as nobody's job:

- it takes capacity: placement, never-fits aside (a verdict is on the empty pool), and a pending
  job's reason see it (:func:`note` names the holders);
- it counts in no tenant's quota: the plane did not admit it, so no queue's books hold it (a
  tenant's namespace quota, or its RBAC, is what keeps a tenant from going around the queues);
- it survives an engine rebuild: :meth:`~xpupool.server.plane.ControlPlane.build` re-applies
  every site's use after the held jobs' (the oldest allocation first, so when a job and a pod
  claim one card, the one charged first keeps it);
- it goes when the holder ends: the site says so through :func:`change`.

A charge that does not fit (its cards held in the plane's books by a job the cluster did not give
them to) is kept waiting and tried again whenever capacity comes free (:func:`retry`) and at
every rebuild; nothing is ever over-committed. Nothing here is stored: a restarted plane's site
reads the pods again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Protocol

from xpupool.engine.engine import Engine
from xpupool.engine.host import EngineHost
from xpupool.engine.outcomes import NoNodeFits, NotAdmitted, Outcome
from xpupool.model.allocation import Allocation
from xpupool.model.errors import Conflict

__all__ = ["Change", "ForeignKey", "ForeignUse", "change", "note", "retry"]

log = logging.getLogger(__name__)

ForeignKey = tuple[str, str]
"""(site, holder): one holder's use on one site."""

NAMED = 3  # holders a pending job's reason names; the rest are counted

Change = Callable[[Callable[[], int]], Sequence[Allocation] | None]
"""A site's change of one holder's use, made under the plane's lock: it records the holder's new
allocations in the site's own book (ids from the given counter) and returns them (empty: it
holds nothing now), or None when nothing changed."""


class _Sites(Protocol):
    def foreign(self) -> Iterator[tuple[ForeignKey, Sequence[Allocation]]]: ...


class _Plane(Protocol):
    """What of the ``ControlPlane`` this module uses (typed here: the plane imports it)."""

    foreign_use: ForeignUse
    host: EngineHost

    @property
    def sites(self) -> _Sites: ...

    @property
    def engine(self) -> Engine: ...

    def locked(self) -> AbstractContextManager[None]: ...

    def bump(self) -> None: ...


@dataclass(slots=True)
class ForeignUse:
    """The plane's book of foreign use: what is applied in the engine served (re-addressed, with
    the engine's ids), and what is waiting for its cards to come free in the plane's books."""

    applied: dict[ForeignKey, tuple[Allocation, ...]] = field(default_factory=dict)
    waiting: set[ForeignKey] = field(default_factory=set)


def change(plane: _Plane, site: str, holder: str, make: Change) -> bool:
    """The plane's one operation for a site's change of ``holder``'s use: under the plane's lock,
    ``make`` records it in the site's book (so that a rebuild re-applies what the site holds),
    what the holder held before is given back and the new charge applied, all or none. Returns
    whether it is applied (False: waiting for its cards, logged; or nothing changed)."""
    key = (site, holder)
    with plane.locked():
        allocations = make(plane.host.ids.take)
        if allocations is None:
            return key in plane.foreign_use.applied
        book = plane.foreign_use
        freed = _release(plane, key)
        book.waiting.discard(key)
        ok = True
        if allocations:
            try:
                book.applied[key] = plane.host.apply(allocations)
            except Conflict as exc:
                book.waiting.add(key)
                log.warning("site %s: %s waits to be counted: %s", site, holder, exc)
                ok = False
        if freed:
            _freed(plane)
        return ok


def retry(plane: _Plane) -> None:
    """Apply the waiting charges that fit now (under the plane's lock): capacity came free."""
    book = plane.foreign_use
    if not book.waiting:
        return
    current = dict(plane.sites.foreign())
    for key in sorted(book.waiting):
        allocations = current.get(key)
        if not allocations:
            book.waiting.discard(key)
            continue
        try:
            book.applied[key] = plane.host.apply(allocations)
        except Conflict:
            continue
        book.waiting.discard(key)
        log.info("site %s: %s counted now", *key)


def _release(plane: _Plane, key: ForeignKey) -> bool:
    old = plane.foreign_use.applied.pop(key, ())
    for alloc in old:
        plane.engine.release(alloc.id)
    return bool(old)


def _freed(plane: _Plane) -> None:
    retry(plane)
    plane.bump()


def note(plane: _Plane, outcome: Outcome) -> str:
    """What a pending job's reason adds when no node had room and foreign use holds cards:
    ``; cards held outside the plane's queues: pod ns/a on n1, ...``; empty otherwise."""
    if not plane.foreign_use.applied or not _no_room(outcome):
        return ""
    holders = [
        f"{holder} on {allocs[0].node}"
        for (_site, holder), allocs in sorted(plane.foreign_use.applied.items())
        if any(a.devices for a in allocs)
    ]
    if not holders:
        return ""
    more = f" and {len(holders) - NAMED} more" if len(holders) > NAMED else ""
    return f"; cards held outside the plane's queues: {', '.join(holders[:NAMED])}{more}"


def _no_room(outcome: object) -> bool:
    """Does ``outcome`` say (or wrap) that no node had room?"""
    if isinstance(outcome, NoNodeFits):
        return True
    if isinstance(outcome, NotAdmitted):
        return any(isinstance(c, NoNodeFits) for c in outcome.causes)
    inner = getattr(outcome, "cause", None)
    return inner is not None and _no_room(inner)
