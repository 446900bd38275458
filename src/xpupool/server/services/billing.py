"""Prices and budgets, the API's side (``/v1/prices``, ``/v1/tenants/{t}/budget``): the
admin's writes go through the plane's one writer (``server/plane/billing_rows.py``), reads
through the plane's :class:`~xpupool.server.usage.billing.Billing`."""

from __future__ import annotations

from xpupool.model.errors import NotFound
from xpupool.server.auth import Principal
from xpupool.server.plane import ControlPlane, billing_rows
from xpupool.server.schemas.billing import Budget, BudgetIn, PriceAnswer, PriceTable


def set_prices(plane: ControlPlane, table: PriceTable) -> PriceAnswer:
    """Replace the price table; costs of usage already recorded follow (docs/usage.md)."""
    now = plane.clock()
    value = table.model_dump(mode="json")
    billing_rows.put_prices(plane, value, now)
    return PriceAnswer.model_validate({**value, "updated_at": now})


def set_budget(plane: ControlPlane, tenant: str, body: BudgetIn) -> Budget:
    billing_rows.put_budget(plane, tenant, body.model_dump(), plane.clock())
    return plane.billing.budget(plane, tenant)


def remove_budget(plane: ControlPlane, tenant: str) -> None:
    billing_rows.remove_budget(plane, tenant)


def budget(plane: ControlPlane, tenant: str, who: Principal) -> Budget:
    """A tenant reads its own budget only: another's is 'not found', as if there were none."""
    if not who.is_admin and who.tenant != tenant:
        raise NotFound("budget", tenant)
    return plane.billing.budget(plane, tenant)
