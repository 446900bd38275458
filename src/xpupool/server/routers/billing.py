"""/v1/prices and /v1/tenants/{t}/budget: metering's prices and budgets (server/usage/billing.py).
The admin sets both; every token reads the prices, a tenant its own budget and spend."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request

from xpupool.server.routers.deps import Admin, Plane, User
from xpupool.server.schemas.base import NAME_PATTERN
from xpupool.server.schemas.billing import Budget, BudgetIn, PriceAnswer, PriceTable
from xpupool.server.services import billing

router = APIRouter(prefix="/v1", tags=["usage"])
TenantParam = Annotated[str, Path(pattern=NAME_PATTERN, max_length=63)]


@router.get("/prices", response_model=PriceAnswer)
def get_prices(plane: Plane, _: User) -> PriceAnswer:
    """The price table costs are computed with (empty until the admin sets one)."""
    return plane.billing.price_answer(plane)


@router.put("/prices", response_model=PriceAnswer)
def put_prices(body: PriceTable, plane: Plane, _: Admin, request: Request) -> PriceAnswer:
    """Replace the price table; costs of usage already recorded follow (docs/usage.md)."""
    request.state.audit_target = "prices"
    return billing.set_prices(plane, body)


@router.get("/tenants/{tenant}/budget", response_model=Budget)
def get_budget(tenant: TenantParam, plane: Plane, me: User) -> Budget:
    """The tenant's budget and what it has spent in the current period; a tenant reads its own
    only (another's is 404)."""
    return billing.budget(plane, tenant, me)


@router.put("/tenants/{tenant}/budget", response_model=Budget)
def put_budget(
    tenant: TenantParam, body: BudgetIn, plane: Plane, _: Admin, request: Request
) -> Budget:
    """Set the tenant's budget and its policy; it applies to jobs submitted from now on."""
    request.state.audit_target = f"budget of tenant {tenant}"
    return billing.set_budget(plane, tenant, body)


@router.delete("/tenants/{tenant}/budget", status_code=204)
def delete_budget(tenant: TenantParam, plane: Plane, _: Admin, request: Request) -> None:
    request.state.audit_target = f"budget of tenant {tenant}"
    billing.remove_budget(plane, tenant)
