"""/v1/throughput: the caller's measured speeds per job type and card model (issue 55)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from xpupool.model.speeds import MAX_KIND_CHARS
from xpupool.server.routers.deps import Plane, User
from xpupool.server.schemas.base import ErrorBody
from xpupool.server.schemas.throughput import MeasuredSpeed
from xpupool.server.services import throughput

router = APIRouter(prefix="/v1", tags=["models"])
_BAD: dict[int | str, dict[str, Any]] = {
    422: {"description": "A tenant token naming another tenant", "model": ErrorBody}
}


@router.get("/throughput", response_model=list[MeasuredSpeed], responses=_BAD)
def measured_speeds(
    plane: Plane,
    who: User,
    kind: Annotated[
        str | None,
        Query(max_length=MAX_KIND_CHARS, description="One job type; every one when absent."),
    ] = None,
    tenant: Annotated[
        str | None, Query(max_length=63, description="Admin only: whose figures; every tenant's.")
    ] = None,
) -> list[MeasuredSpeed]:
    """What the caller's jobs reported of their speed per job type and card model (the admin:
    any tenant's), as stored; ``xpupool plan`` turns them into relative speeds."""
    return throughput.measured(plane, who, kind=kind, tenant=tenant)
