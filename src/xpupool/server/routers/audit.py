"""/v1/audit: the admin reads who did what (``server/audit.py``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from xpupool.server import schemas as s
from xpupool.server.routers.deps import Admin, Plane

router = APIRouter(prefix="/v1", tags=["audit"])


@router.get("/audit", response_model=list[s.AuditEntry])
def list_audit(
    plane: Plane,
    _: Admin,
    since: Annotated[
        float | None, Query(ge=0, le=1e11, description="Unix time, seconds; none = any.")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=10_000, description="The newest this many.")] = 100,
) -> list[s.AuditEntry]:
    """The newest ``limit`` entries at or after ``since``, oldest first."""
    return plane.audit.entries(since, limit)
