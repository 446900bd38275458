"""/v1/models and /v1/plan: the model catalog, and which cards serve a model (docs/models.md)."""

from __future__ import annotations

from fastapi import APIRouter

from xpupool.server.routers.deps import Plane, User
from xpupool.server.schemas.models import CatalogModel, ModelIntent, PlanRow
from xpupool.server.services import models

router = APIRouter(prefix="/v1", tags=["models"])


@router.get("/models", response_model=list[CatalogModel])
def list_models(_: User) -> list[CatalogModel]:
    """The models ``plan`` and ``submit --model`` know, with their figures and runtimes."""
    return models.list_models()


@router.post("/plan", response_model=list[PlanRow])
def plan(body: ModelIntent, plane: Plane, _: User) -> list[PlanRow]:
    """For every card type of the catalog and the pool: cards, parallelism, memory per card,
    decode speed, power and whether the pool can place it now; best first."""
    return models.plan_rows(plane, body)
