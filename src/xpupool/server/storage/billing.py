"""Metering's prices and budgets (issue 52): the one price table the admin sets, and each
tenant's budget per period with what happens when it is spent (``server/usage/billing.py``).

The price table is one row (``name`` 'prices') holding the table as JSON: it is read whole,
written whole and small (one price per card model). A budget is one row per tenant. Neither is
a foreign key of the tenants table's rows' lifetimes: usage outlives jobs, and a budget is the
admin's word until the admin removes it.
"""

from __future__ import annotations

from sqlalchemy import JSON, Column, Float, Integer, String, Table

from xpupool.server.storage.meta import metadata

usage_prices = Table(
    "usage_prices",
    metadata,
    Column("name", String(20), primary_key=True),  # 'prices': the one table
    Column("prices", JSON, nullable=False),  # schemas/billing.py PriceTable as a dict
    Column("updated_at", Float, nullable=False),
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
