"""/v1/usage and /v1/usage/export: metering's reads (server/usage/query.py)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import PlainTextResponse

from xpupool.server.routers.deps import Plane, User
from xpupool.server.schemas.base import ErrorBody
from xpupool.server.schemas.usage import UsageAnswer
from xpupool.server.usage import query

router = APIRouter(prefix="/v1", tags=["usage"])
_BAD: dict[int | str, dict[str, Any]] = {
    422: {"description": "A bad by, step, from, to or month", "model": ErrorBody}
}


@router.get("/usage", response_model=UsageAnswer, responses=_BAD)
def get_usage(
    plane: Plane,
    who: User,
    by: Annotated[
        str, Query(max_length=100, description="Comma list of tenant, queue, site, model.")
    ] = "tenant",
    start: Annotated[
        str | None,
        Query(alias="from", max_length=40, description="Unix seconds or ISO time; 30 days back."),
    ] = None,
    end: Annotated[
        str | None, Query(alias="to", max_length=40, description="Unix seconds or ISO; now.")
    ] = None,
    step: Annotated[str, Query(max_length=10, description="hour, day or month.")] = "day",
) -> UsageAnswer:
    """Usage summed per bucket and label: a tenant sees its own rows, the admin every tenant's
    (tenant ``pool``: the unheld share of held cards' energy)."""
    return query.usage(plane, who, by, start, end, step)


@router.get(
    "/usage/export",
    response_class=PlainTextResponse,
    responses={**_BAD, 200: {"content": {"text/csv": {}}, "description": "The month's CSV."}},
)
def export_usage(
    plane: Plane,
    who: User,
    month: Annotated[str, Query(max_length=7, description="YYYY-MM (UTC).")],
) -> PlainTextResponse:
    """One row per tenant, queue, site and model for the month, in hours and kWh; header:
    month,tenant,queue,site,model,device_hours,device_memory_gib_hours,compute_unit_hours,
    energy_kwh (docs/usage.md)."""
    body = query.export_csv(plane, who, month)
    return PlainTextResponse(body, media_type="text/csv")
