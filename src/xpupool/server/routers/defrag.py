"""/v1/defrag: online defragmentation's dry run (docs/defragmentation.md)."""

from __future__ import annotations

from fastapi import APIRouter

from xpupool.server.routers.deps import Admin, Plane
from xpupool.server.schemas.defrag import DefragPlanView
from xpupool.server.services import defrag_plan

router = APIRouter(prefix="/v1", tags=["defrag"])


@router.get("/defrag/plan", response_model=DefragPlanView)
def get_defrag_plan(plane: Plane, _: Admin) -> DefragPlanView:
    """Admin: the moves defragmentation would make now, per pending job, and what they would
    free; changes nothing."""
    return defrag_plan.plan(plane)
