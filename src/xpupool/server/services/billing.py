"""Prices and budgets, the API's side (``/v1/prices``, ``/v1/tenants/{t}/budget``): the
admin's writes go through the plane's one writer (``server/plane/billing_rows.py``), reads
through the plane's :class:`~xpupool.server.usage.billing.Billing`."""

from __future__ import annotations

from xpupool.model.errors import NotFound, RequestError
from xpupool.server.auth import Principal
from xpupool.server.plane import ControlPlane, billing_rows
from xpupool.server.schemas.billing import (
    Budget,
    BudgetIn,
    PriceAnswer,
    PriceHistory,
    PriceTable,
)
from xpupool.server.usage.query import parse_time


def set_prices(plane: ControlPlane, table: PriceTable, at: str | None = None) -> PriceAnswer:
    """The price table from ``at`` (Unix seconds or ISO time; default now) on. Usage recorded
    before keeps the prices it was recorded at (docs/usage.md), so ``at`` may not be in the
    past: a :class:`RequestError` naming it, nothing written."""
    value = table.model_dump(mode="json")
    wanted = None if at is None else parse_time("at", at)
    with plane.meter.pricing():  # no flush prices with the tables while they change
        now = plane.clock()
        effective = now if wanted is None else wanted
        if effective < now:
            raise RequestError(
                "at", at, "is in the past: usage up to now is priced already; give now or later"
            )
        billing_rows.put_prices(plane, value, effective, now)
    return PriceAnswer.model_validate({**value, "effective_at": effective, "updated_at": now})


def prices(plane: ControlPlane, at: str | None = None) -> PriceAnswer:
    """The table in force at ``at`` (Unix seconds or ISO time; default now)."""
    return plane.billing.price_answer(plane, None if at is None else parse_time("at", at))


def price_history(plane: ControlPlane) -> PriceHistory:
    return PriceHistory(tables=plane.billing.price_history(plane))


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
