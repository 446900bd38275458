"""/v1/audit: the admin reads who did what (``server/audit.py``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from xpupool.server.routers.deps import Admin, Plane
from xpupool.server.schemas.audit import AuditEntry, AuditKind

router = APIRouter(prefix="/v1", tags=["audit"])


@router.get("/audit", response_model=list[AuditEntry])
def list_audit(
    plane: Plane,
    _: Admin,
    since: Annotated[
        float | None, Query(ge=0, le=1e11, description="Unix time, seconds; none = any.")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=10_000, description="The newest this many.")] = 100,
    kind: Annotated[AuditKind | None, Query(description="Of this kind only; none = every.")] = None,
) -> list[AuditEntry]:
    """The newest ``limit`` entries whose last occurrence is at or after ``since``, oldest
    first; a credential's refused requests come aggregated, with their ``count``."""
    return plane.audit.entries(since, limit, kind)
