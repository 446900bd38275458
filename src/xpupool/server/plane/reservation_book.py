"""The plane's reservation book (``engine/cycle/reservations.py``) and how a stored row becomes
one of its reservations: the book is memory, read back from the store with the plane's other books
(``ControlPlane._read``), so a restarted plane holds the cards each reservation picked. The rows'
writes and the stops at a window's edges are ``reservation_rows.py``'s.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from sqlalchemy import Connection, select

from xpupool.engine.cycle.reservations import Reservation, Reservations, Terms
from xpupool.model.errors import RequestError
from xpupool.model.request import Request
from xpupool.model.request_model import request_from_dict
from xpupool.server.plane.records import HeldJob, PendingJob
from xpupool.server.storage.reservations import reservations as t_reservations


class Jobs(Protocol):
    """What the book reads of the plane: its clock and its jobs."""

    @property
    def clock(self) -> Callable[[], float]: ...
    @property
    def queued(self) -> Mapping[int, PendingJob]: ...
    @property
    def held_jobs(self) -> Mapping[int, HeldJob]: ...


CARDS = re.compile(r"^(?:(?P<model>[A-Za-z0-9][A-Za-z0-9._-]*?)x)?(?P<count>[1-9][0-9]{0,2})$")
"""``A100x4`` (4 cards of that model), ``4`` (4 cards of any model)."""


def shape(name: str, cards: str, site: str | None) -> Request:
    """The shape a reservation holds: one replica of the cards ``cards`` says, whole, kept to
    ``site`` (None: any). Raises RequestError at ``cards`` for text of another form."""
    match = CARDS.match(cards)
    if match is None:
        raise RequestError("cards", cards, "expected MODELxCOUNT such as 'A100x4', or a count")
    model = match["model"]
    devices: dict[str, object] = {"count": int(match["count"])}
    if model:
        devices["models"] = [model]
    form: dict[str, object] = {"name": f"reservation-{name}", "devices": devices}
    if site:
        form["site"] = site
    try:
        return request_from_dict(form)
    except RequestError as exc:  # a model or site the request form refuses: --cards's, --site's
        field = "site" if exc.field.startswith("site") else "cards"
        raise RequestError(field, site if field == "site" else cards, exc.reason) from None


def from_row(r: dict[str, Any]) -> Reservation:
    """The engine's reservation of a stored row (or one about to be stored)."""
    holder = r["job"] or r["tenant"]
    reserved = shape(r["name"], r["cards"], r["site"])
    return Reservation(r["name"], holder, reserved, float(r["start_at"]), float(r["end_at"]))


def book(plane: Jobs) -> Reservations:
    """An empty book on the plane's clock and jobs."""

    def terms(job_id: int) -> Terms:
        pending = plane.queued.get(job_id)
        if pending is not None:
            name = pending.request.name
            return Terms(
                pending.reservation,
                pending.tenant,
                name,
                pending.preemptible,
                pending.max_runtime_s,
            )
        held = plane.held_jobs.get(job_id)
        if held is None:
            return Terms(None, "", "", False, None)
        return Terms(held.reservation, held.tenant, "", held.preemptible, held.max_runtime_s)

    return Reservations(plane.clock, terms)


def load(conn: Connection, into: Reservations) -> None:
    """Every stored reservation into the (empty) book ``into``, holding the cards it picked."""
    for row in conn.execute(select(t_reservations).order_by(t_reservations.c.name)):
        r = dict(row._mapping)
        into.restore(from_row(r), tuple(r["devices"]))
