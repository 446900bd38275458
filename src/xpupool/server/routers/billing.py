"""/v1/prices and /v1/tenants/{t}/budget: metering's prices and budgets (server/usage/billing.py).
The admin sets both; every token reads the prices, a tenant its own budget and spend."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Request

from xpupool.server.routers.deps import Admin, Plane, User
from xpupool.server.schemas.base import NAME_PATTERN
from xpupool.server.schemas.billing import Budget, BudgetIn, PriceAnswer, PriceHistory, PriceTable
from xpupool.server.services import billing

router = APIRouter(prefix="/v1", tags=["usage"])
TenantParam = Annotated[str, Path(pattern=NAME_PATTERN, max_length=63)]
AtParam = Annotated[
    str | None,
    Query(max_length=40, description="Unix seconds or an ISO time (UTC if no zone); default now."),
]


@router.get("/prices", response_model=PriceAnswer)
def get_prices(plane: Plane, _: User, at: AtParam = None) -> PriceAnswer:
    """The price table in force at ``at`` (empty before the admin's first one)."""
    return billing.prices(plane, at)


@router.get("/prices/history", response_model=PriceHistory)
def get_price_history(plane: Plane, _: User) -> PriceHistory:
    """Every price table with the time it takes effect, those to come included."""
    return billing.price_history(plane)


@router.put("/prices", response_model=PriceAnswer)
def put_prices(
    body: PriceTable, plane: Plane, _: Admin, request: Request, at: AtParam = None
) -> PriceAnswer:
    """The price table from ``at`` (default now; not in the past) until the next one; usage
    already recorded keeps its prices (docs/usage.md)."""
    request.state.audit_target = "prices"
    return billing.set_prices(plane, body, at)


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
