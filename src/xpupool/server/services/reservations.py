"""Reservations (``/v1/reservations``): the admin makes and deletes them, a tenant lists its own,
and a job names one to run in it (checked here, at submission). The rules are the engine's
(``engine/cycle/reservations.py``); the plane keeps the book and the rows
(``plane/reservation_rows.py``); :class:`WindowEdges` applies the stops at a window's edges from
the server's watch thread."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from xpupool.model.errors import Forbidden, RequestError
from xpupool.server.auth import Principal
from xpupool.server.plane import reservation_rows
from xpupool.server.schemas.reservations import (
    MAX_WINDOW_S,
    Phase,
    ReservationIn,
    ReservationView,
)

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from xpupool.server.plane.control import ControlPlane


def create(plane: ControlPlane, body: ReservationIn) -> ReservationView:
    """Hold its cards and store it; 422 naming the field (``start_at`` in the past, ``cards``
    the pool cannot hold beside the reservations overlapping it, or of another form, ``tenant``
    unknown), 409 for a name taken; nothing is stored on refusal."""
    if body.tenant not in plane.tenant_index:
        raise RequestError("tenant", body.tenant, "no tenant of that name")
    if body.end_at - body.start_at > MAX_WINDOW_S:
        why = f"the window may last {MAX_WINDOW_S} s at most"
        raise RequestError("end_at", body.end_at, why)
    row = body.model_dump()
    try:
        stored = reservation_rows.create(plane, row)
    except RequestError as exc:  # the engine's names: the API's fields
        field = {"from": "start_at", "to": "end_at"}.get(exc.field, exc.field)
        raise RequestError(field, getattr(body, field, exc.value), exc.reason) from None
    return _view(plane, stored)


def listed(plane: ControlPlane, who: Principal) -> list[ReservationView]:
    """Every reservation for the admin; a tenant's own for a tenant."""
    if who.is_admin:
        rows = reservation_rows.listed(plane)
    elif who.tenant is None:
        raise Forbidden("only a tenant or the admin sees reservations")
    else:
        rows = reservation_rows.listed(plane, who.tenant)
    return [_view(plane, r) for r in rows]


def delete(plane: ControlPlane, name: str) -> None:
    """Its cards are anyone's; its pending jobs are refused at the next look (WindowEdges)."""
    reservation_rows.remove(plane, name)


def check_entry(conn: Connection, plane: ControlPlane, tenant: str, name: str | None) -> None:
    """A submission's ``reservation`` (422 at ``reservation``): one of its tenant's that has
    not ended; another tenant's is reported as absent, as another tenant's secret is."""
    if name is None:
        return
    row = reservation_rows.row(conn, name)
    if row is None or row["tenant"] != tenant:
        raise RequestError("reservation", name, "no reservation of that name")
    if plane.clock() >= row["end_at"]:
        raise RequestError("reservation", name, "its window has ended")


def _view(plane: ControlPlane, row: dict[str, Any]) -> ReservationView:
    now = plane.clock()
    phase: Phase = "ahead" if now < row["start_at"] else "open" if now < row["end_at"] else "ended"
    return ReservationView(**row, phase=phase)


class WindowEdges:
    """The stops due at the windows' edges (``reservation_rows.edges``), looked at on every
    pass of the watch thread, remembering when it last looked."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        self.seen = plane.clock()

    def check(self) -> list[int]:
        now = self.plane.clock()
        stopped = reservation_rows.edges(self.plane, self.seen)
        self.seen = now
        return stopped
