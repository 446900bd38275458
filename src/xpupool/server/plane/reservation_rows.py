"""Reservations in the plane: their rows in the store and the stops at a window's edges; the
book the scheduling cycle consults is ``reservation_book.py``'s.

The store keeps each reservation with the cards it picked, so a restarted plane holds the same
cards. A creation
is checked against the book and stored in one step under the plane's lock, so two creations never
pick the same card; a refusal stores nothing. The services (``services/reservations.py``) call
these; nothing outside the package takes the lock.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, delete, insert, select

from xpupool.engine.outcomes import ReservationClosed, render
from xpupool.model.allocation import Allocation
from xpupool.model.errors import Conflict, NotFound
from xpupool.server import job_lifecycle as lc
from xpupool.server.plane.reservation_book import from_row
from xpupool.server.schemas.jobs import StopCause
from xpupool.server.storage.reservations import reservations as t_reservations

if TYPE_CHECKING:
    from xpupool.server.plane.control import ControlPlane

log = logging.getLogger("xpupool.server")


def create(plane: ControlPlane, row: dict[str, Any]) -> dict[str, Any]:
    """Hold cards for the reservation of ``row`` (its stored fields but its devices and creation
    time) and store it, in one step; refused (:class:`RequestError` naming the field,
    :class:`Conflict` for a name taken) with nothing held or stored. Returns the stored row."""
    reservation = from_row(row)
    with plane.write() as conn:
        if plane.reservations.get(reservation.name) is not None:
            raise Conflict(f"reservation {reservation.name!r} already exists")
        cards = plane.reservations.check(reservation, plane.engine)
        stored = {**row, "devices": list(cards), "created_at": plane.clock()}
        conn.execute(insert(t_reservations).values(**stored))
        plane.reservations.restore(reservation, cards)
    plane.bump()  # cards held: pending jobs are decided again by the rules
    return stored


def remove(plane: ControlPlane, name: str) -> None:
    """Forget reservation ``name``: its cards are anyone's, its pending jobs are refused."""
    with plane.write() as conn:
        if plane.reservations.get(name) is None:
            raise NotFound("reservation", name)
        conn.execute(delete(t_reservations).where(t_reservations.c.name == name))
        plane.reservations.remove(name)
    plane.bump()


def row(conn: Connection, name: str) -> dict[str, Any] | None:
    """The stored reservation ``name``; None when there is none."""
    found = conn.execute(select(t_reservations).where(t_reservations.c.name == name)).first()
    return None if found is None else dict(found._mapping)


def listed(plane: ControlPlane, tenant: str | None = None) -> list[dict[str, Any]]:
    """The stored reservations (of ``tenant``; None: all), by name."""
    q = select(t_reservations).order_by(t_reservations.c.name)
    if tenant is not None:
        q = q.where(t_reservations.c.tenant == tenant)
    with plane.db.connect() as conn:
        return [dict(r._mapping) for r in conn.execute(q)]


def placement_note(plane: ControlPlane, reservation: str | None, allocs: list[Allocation]) -> str:
    """What a job's schedule event adds about reservations: the one it runs in, or the one
    lending it its cards until its window begins (it is preempted then)."""
    if reservation is not None:
        return f"; in reservation {reservation}"
    lender = plane.reservations.lent_by(u for a in allocs for u in a.device_uuids)
    if lender is None:
        return ""
    return f"; on cards of reservation {lender.name}, lent until its window begins"


def edges(plane: ControlPlane, seen: float) -> list[int]:
    """The stops due at the windows' edges since ``seen`` (the plane's clock at the last look):
    borrowers on the cards of a window that has begun (cause ``preempted``), jobs of a window
    that has ended still running (cause ``max_runtime``), and pending jobs of a reservation that
    has ended or is gone (refused: cause ``unrunnable``). Returns the jobs stopped. A window's
    edge passed also wakes the scheduling loop, so that the jobs waiting for it are tried."""
    stops: list[tuple[int, lc.Stop]] = []
    with plane.locked():
        book_ = plane.reservations
        now = plane.clock()
        for r in book_:
            for at, what in ((r.start_s, "begins"), (r.end_s, "ends")):
                if seen < at <= now:
                    log.info("reservation %s %s: cards %s", r.name, what, book_.cards(r.name))
                    plane.bump()
        running = {j.id: j for j in plane.held_jobs.values()}
        for job, why in book_.reclaims(running):
            text = f"{render(why)}; it borrowed them on that condition"
            stops.append((job.id, lc.Stop(StopCause.PREEMPTED, text)))
        for job, closed in book_.overruns(running):
            stops.append((job.id, lc.Stop(StopCause.MAX_RUNTIME, render(closed))))
        for pending in plane.queued.values():
            if pending.reservation is None:
                continue
            held = book_.constrain(pending.id, pending.request)
            if isinstance(held, ReservationClosed):
                stops.append((pending.id, lc.Stop(StopCause.UNRUNNABLE, render(held))))
    return plane.stop_jobs(stops) if stops else []
