"""/v1/reservations: cards held for a tenant in a time window (docs/reservations.md)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request

from xpupool.server.routers.deps import Admin, Plane, User
from xpupool.server.schemas.base import NAME_PATTERN
from xpupool.server.schemas.reservations import ReservationIn, ReservationView
from xpupool.server.services import reservations

router = APIRouter(prefix="/v1", tags=["reservations"])
NameParam = Annotated[str, Path(pattern=NAME_PATTERN, max_length=63)]


@router.post("/reservations", response_model=ReservationView, status_code=201)
def create_reservation(
    body: ReservationIn, plane: Plane, _: Admin, request: Request
) -> ReservationView:
    """Hold cards for a tenant in a window; lent to preemptible work until it begins."""
    request.state.audit_target = f"reservation {body.name}"
    return reservations.create(plane, body)


@router.get("/reservations", response_model=list[ReservationView])
def list_reservations(plane: Plane, me: User) -> list[ReservationView]:
    """Every reservation for the admin; a tenant's own for a tenant."""
    return reservations.listed(plane, me)


@router.delete("/reservations/{name}", status_code=204)
def delete_reservation(name: NameParam, plane: Plane, _: Admin, request: Request) -> None:
    """Release a reservation's cards; jobs waiting for it are refused."""
    request.state.audit_target = f"reservation {name}"
    reservations.delete(plane, name)
