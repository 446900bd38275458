"""Metering's prices and budgets (issue 52): the price tables the admin sets, each from the time
it takes effect, and each tenant's budget per period with what happens when it is spent
(``server/usage/billing.py``).

A price table is one row of ``usage_price_tables`` keyed by the time it takes effect, holding the
table as JSON: read whole, written whole and small (one price per card model); the table in force
at a time is the row with the latest ``effective_at`` at or before it. Usage is priced as the
meter records it (``server/usage/meter.py``), so the rows are history: a table takes effect now
or later, never before. ``usage_prices`` is the single table of stores made before prices had a
history: :func:`move_single_table` moves its row into the history at start. A budget is one row
per tenant. Neither is a foreign key of the tenants table's rows' lifetimes: usage outlives jobs,
and a budget is the admin's word until the admin removes it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from sqlalchemy import JSON, Column, Connection, Float, Integer, String, Table, delete, select
from sqlalchemy import update as sql_update

from xpupool.server.storage.meta import metadata

usage_prices = Table(
    "usage_prices",
    metadata,
    Column("name", String(20), primary_key=True),  # 'prices': the one table
    Column("prices", JSON, nullable=False),  # schemas/billing.py PriceTable as a dict
    Column("updated_at", Float, nullable=False),
)
"""The single price table of stores made before prices had a history (moved at start)."""

usage_price_tables = Table(
    "usage_price_tables",
    metadata,
    Column("effective_at", Float, primary_key=True),  # Unix seconds: in force from then on
    Column("prices", JSON, nullable=False),  # schemas/billing.py PriceTable as a dict
    Column("updated_at", Float, nullable=False),  # when the admin set it
)

usage_budgets = Table(
    "usage_budgets",
    metadata,
    Column("tenant", String(63), primary_key=True),
    Column("period", String(8), nullable=False),  # day | week | month (UTC)
    Column("amount", Float, nullable=False),  # in the price table's currency
    Column("policy", String(20), nullable=False),  # warn | lower-priority | refuse
    Column("lowered_priority", Integer, nullable=False),  # lower-priority: new jobs' cap
    Column("updated_at", Float, nullable=False),
)


def move_single_table(
    conn: Connection, cost_of: Callable[[Mapping[str, Any], str], tuple[float, float, float]]
) -> bool:
    """Move an older store's single price table into the history, in force since 0 (it priced
    everything recorded, as the older release did), and price the rollups recorded under it:
    ``cost_of(table, model)`` gives (per card-hour, per compute-unit-hour, per kWh) for a
    rollup's printed model name. Done once: the old row is deleted in the same transaction.
    Returns whether there was one to move."""
    from xpupool.server.storage.usage import usage_rollups

    old = conn.execute(select(usage_prices)).mappings().first()
    if old is None:
        return False
    table = dict(old["prices"])
    have = conn.execute(select(usage_price_tables.c.effective_at)).first()
    if have is None:  # a history already there was written by this release: leave it
        conn.execute(
            usage_price_tables.insert().values(
                effective_at=0.0, prices=table, updated_at=float(old["updated_at"])
            )
        )
        r = usage_rollups
        for (model,) in conn.execute(select(r.c.model).distinct()).all():
            card_h, cu_h, kwh = cost_of(table, str(model))
            conn.execute(
                sql_update(r)
                .where(r.c.model == model)
                .values(
                    cost=r.c.device_seconds / 3600.0 * card_h
                    + r.c.cu_seconds / 3600.0 * cu_h
                    + r.c.energy_j / 3.6e6 * kwh
                )
            )
    conn.execute(delete(usage_prices))
    return True
