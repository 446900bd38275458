"""The store's side of prices and budgets (``server/usage/billing.py`` holds what is read of
them, ``server/services/billing.py`` is the API's side). Each write is one transaction under the
plane's lock and forgets the plane's prices, budgets and spend in the same step, so no
submission after it is judged by what was there before."""

from __future__ import annotations

from typing import Any, Protocol

from sqlalchemy import delete, insert, select, update

from xpupool.model.errors import NotFound
from xpupool.server.storage.billing import usage_budgets, usage_price_tables
from xpupool.server.storage.tenants import tenants as t_tenants
from xpupool.server.usage.billing import Billing


class Store(Protocol):
    billing: Billing

    def write(self) -> Any: ...


def put_prices(plane: Store, prices: dict[str, Any], effective_at: float, now: float) -> None:
    """The price table is ``prices`` (``PriceTable`` as a dict) from ``effective_at`` on (the
    caller holds the meter's flushes off and checks it is not before now: what was recorded is
    priced already); a table set for the same time before is replaced."""
    with plane.write() as conn:
        t = usage_price_tables
        values = {"prices": prices, "updated_at": now}
        where = t.c.effective_at == effective_at
        if not conn.execute(update(t).where(where).values(values)).rowcount:
            conn.execute(insert(t).values(effective_at=effective_at, **values))
        plane.billing.forget()


def put_budget(plane: Store, tenant: str, values: dict[str, Any], now: float) -> None:
    """``tenant``'s budget is ``values`` (``BudgetIn`` as a dict); :class:`NotFound` for a
    tenant that does not exist (nothing written)."""
    with plane.write() as conn:
        if conn.execute(select(t_tenants.c.name).where(t_tenants.c.name == tenant)).first() is None:
            raise NotFound("tenant", tenant)
        t = usage_budgets
        values = values | {"updated_at": now}
        if not conn.execute(update(t).where(t.c.tenant == tenant).values(values)).rowcount:
            conn.execute(insert(t).values(tenant=tenant, **values))
        plane.billing.forget()


def remove_budget(plane: Store, tenant: str) -> None:
    """No budget for ``tenant`` from now on; :class:`NotFound` when it had none."""
    with plane.write() as conn:
        if not conn.execute(delete(usage_budgets).where(usage_budgets.c.tenant == tenant)).rowcount:
            raise NotFound("budget", tenant)
        plane.billing.forget()
