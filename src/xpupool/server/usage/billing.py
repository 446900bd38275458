"""Prices and budgets (issue 52): what usage costs, what each tenant has spent in its budget's
period, and what a new job of a tenant that spent its budget gets at admission.

Cost is usage at the price table's prices: card-hours by share x the model's price per
card-hour, plus compute-unit-hours x the price per unit-hour, plus kWh x the price per kWh.
Prices apply to usage already recorded as well (the table has no history): a changed price
reprices the whole period. Spend is read from the day and month rollups (``storage/usage.py``)
and changes only when the meter flushes, so it is computed once per tenant per flush (and per
price or budget change), not per submission: admission pays a dict lookup.

A budget's policy applies while spend has reached its amount: ``warn`` admits the job with an
event saying so and counts it (``xpupool_budget_exceeded_jobs_total``); ``lower-priority``
admits it at the budget's ``lowered_priority`` at most, with an event; ``refuse`` refuses it
(:class:`NotGranted`, 403) with the budget and the figures, storing nothing.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from sqlalchemy import Connection, Engine, func, select

from xpupool.catalog.accelerators import AcceleratorCatalog
from xpupool.model.errors import NotFound, NotGranted
from xpupool.server.schemas.billing import Budget, PriceAnswer, PriceTable
from xpupool.server.storage.billing import usage_budgets, usage_prices
from xpupool.server.storage.usage import usage_rollups
from xpupool.server.usage.buckets import month_start, next_month

if TYPE_CHECKING:
    from xpupool.server.usage.meter import UsageMeter

_DAY = 86400.0
PRICE_ROW = "prices"
"""The one row of ``usage_prices``."""


class ControlPlane(Protocol):
    """What billing reads of the plane (``server/plane/control.py``, which holds the one
    :class:`Billing`): the plane imports this module, so it names no plane type."""

    db: Engine
    meter: UsageMeter

    def clock(self) -> float: ...


@dataclass(frozen=True, slots=True)
class Prices:
    """The price table as cost is computed from it; ``per_card_hour`` by catalog name (or the
    printed name of a model the catalog lacks)."""

    currency: str = ""
    per_cu_hour: float = 0.0
    per_kwh: float = 0.0
    per_card_hour: Mapping[str, float] = field(default_factory=dict)
    catalog: AcceleratorCatalog | None = None
    set_at: float | None = None  # None: the admin has set no table

    def card_hour(self, printed: str) -> float:
        """The price of a card-hour of the model a probe names ``printed`` (0: none given)."""
        if not self.per_card_hour:
            return 0.0
        found = self.catalog.lookup(printed) if self.catalog is not None else None
        return self.per_card_hour.get(found.name if found is not None else printed, 0.0)

    def cost(self, model: str, device_s: float, cu_s: float, energy_j: float) -> float:
        return (
            device_s / 3600.0 * self.card_hour(model)
            + cu_s / 3600.0 * self.per_cu_hour
            + energy_j / 3.6e6 * self.per_kwh
        )


@dataclass(frozen=True, slots=True)
class Verdict:
    """What a budget does to one new job: its priority now and the event it gets (None: within
    budget, or no budget)."""

    priority: int
    note: str | None = None
    policy: str | None = None


def period_bounds(period: str, now: float) -> tuple[float, float]:
    """[start, end) of the UTC ``period`` ('day', 'week' from Monday, 'month') holding ``now``."""
    day = math.floor(now / _DAY) * _DAY
    if period == "day":
        return day, day + _DAY
    if period == "week":
        start = day - datetime.fromtimestamp(day, UTC).weekday() * _DAY
        return start, start + 7 * _DAY
    start = month_start(now)
    return start, next_month(start)


class Billing:
    """The plane's prices, budgets and spend (``plane.billing``): read from the store on first
    use, forgotten on every change (:meth:`forget`), spend recomputed after each meter flush."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._prices: Prices | None = None
        self._budgets: dict[str, Any] | None = None
        self._spent: dict[tuple[str, float], tuple[int, float]] = {}  # -> (flush, spend)
        # moved by every forget: a read begun before a change keeps nothing of what it read
        self._generation = 0
        self.exceeded: dict[tuple[str, str], int] = {}  # (tenant, policy) -> jobs admitted over

    def forget(self) -> None:
        with self._lock:
            self._generation += 1
            self._prices = self._budgets = None
            self._spent = {}

    # ---- reads
    def prices(self, plane: ControlPlane, conn: Connection | None = None) -> Prices:
        found = self._prices
        if found is None:
            generation = self._generation
            row = _read_one(
                plane, conn, select(usage_prices).where(usage_prices.c.name == PRICE_ROW)
            )
            table = PriceTable.model_validate(row["prices"] if row is not None else {})
            catalog = plane.meter.power.catalog
            by_name: dict[str, float] = {}
            for price in table.models:
                known = catalog.lookup(price.model)
                by_name[known.name if known is not None else price.model] = price.per_card_hour
            set_at = None if row is None else float(row["updated_at"])
            found = Prices(
                table.currency, table.per_compute_unit_hour, table.per_kwh, by_name, catalog, set_at
            )
            with self._lock:
                if generation == self._generation:
                    self._prices = found
        return found

    def priced(self, plane: ControlPlane) -> bool:
        """Whether the admin has set a price table (else usage shows no cost)."""
        return self.prices(plane).set_at is not None

    def price_answer(self, plane: ControlPlane) -> PriceAnswer:
        row = _read_one(plane, None, select(usage_prices).where(usage_prices.c.name == PRICE_ROW))
        if row is None:
            return PriceAnswer.model_validate({})
        return PriceAnswer.model_validate({**row["prices"], "updated_at": row["updated_at"]})

    def _budget_rows(self, plane: ControlPlane, conn: Connection | None) -> dict[str, Any]:
        found = self._budgets
        if found is None:
            generation = self._generation
            query = select(usage_budgets)
            if conn is None:
                with plane.db.connect() as own:
                    rows = own.execute(query).mappings().all()
            else:
                rows = conn.execute(query).mappings().all()
            found = {str(r["tenant"]): dict(r) for r in rows}
            with self._lock:
                if generation == self._generation:
                    self._budgets = found
        return found

    def spent(
        self, plane: ControlPlane, conn: Connection | None, tenant: str, start: float, end: float
    ) -> float:
        """The cost of ``tenant``'s usage in [start, end) (whole days or a month), as of the
        meter's last flush."""
        flushes, generation = plane.meter.flushes, self._generation
        key = (tenant, start)
        found = self._spent.get(key)
        if found is not None and found[0] == flushes:
            return found[1]
        prices = self.prices(plane, conn)
        r = usage_rollups
        step = "month" if end - start > 7 * _DAY else "day"
        query = (
            select(r.c.model, *(func.sum(r.c[n]) for n in ("device_seconds", "cu_seconds")))
            .add_columns(func.sum(r.c.energy_j))
            .where(r.c.step == step, r.c.tenant == tenant, r.c.bucket >= start, r.c.bucket < end)
            .group_by(r.c.model)
        )
        if conn is None:
            with plane.db.connect() as own:
                rows = own.execute(query).all()
        else:
            rows = conn.execute(query).all()
        value = sum(prices.cost(str(m), float(d), float(c), float(e)) for m, d, c, e in rows)
        with self._lock:
            if len(self._spent) > 10_000:  # periods past: forget them all
                self._spent = {}
            if generation == self._generation:
                self._spent[key] = (flushes, value)
        return value

    def budget(self, plane: ControlPlane, tenant: str) -> Budget:
        """The tenant's budget and its spend in the current period; :class:`NotFound` when the
        admin set none."""
        row = self._budget_rows(plane, None).get(tenant)
        if row is None:
            raise NotFound("budget", tenant)
        return self._view(plane, None, row)

    def _view(self, plane: ControlPlane, conn: Connection | None, row: Mapping[str, Any]) -> Budget:
        start, end = period_bounds(str(row["period"]), plane.clock())
        spent = self.spent(plane, conn, str(row["tenant"]), start, end)
        return Budget.model_validate(
            {
                **row,
                "currency": self.prices(plane, conn).currency,
                "period_start": start,
                "period_end": end,
                "spent": spent,
                "exceeded": spent >= float(row["amount"]),
            }
        )

    # ---- admission
    def judge(self, plane: ControlPlane, conn: Connection, tenant: str, priority: int) -> Verdict:
        """What the tenant's budget does to a new job at ``priority``; raises
        :class:`NotGranted` when its policy refuses it. Writes nothing (the caller counts an
        admitted job over budget with :meth:`count`)."""
        row = self._budget_rows(plane, conn).get(tenant)
        if row is None:
            return Verdict(priority)
        view = self._view(plane, conn, row)
        if not view.exceeded:
            return Verdict(priority)
        money = f"{view.spent:.2f}{' ' + view.currency if view.currency else ''}"
        of = f"{view.amount:.2f}{' ' + view.currency if view.currency else ''}"
        until = datetime.fromtimestamp(view.period_end, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        spent = f"tenant {tenant!r} has spent {money} of its {view.period} budget of {of}"
        if view.policy == "refuse":
            raise NotGranted(
                "tenant",
                tenant,
                f"{spent} (policy refuse): new jobs are refused until {until}, or until the "
                "admin raises the budget",
            )
        if view.policy == "lower-priority" and priority > view.lowered_priority:
            note = (
                f"priority {priority} lowered to {view.lowered_priority}: {spent} "
                "(policy lower-priority)"
            )
            return Verdict(view.lowered_priority, note, view.policy)
        return Verdict(priority, f"over budget: {spent} (policy {view.policy})", view.policy)

    def count(self, tenant: str, policy: str) -> None:
        with self._lock:
            self.exceeded[(tenant, policy)] = self.exceeded.get((tenant, policy), 0) + 1


def _read_one(plane: ControlPlane, conn: Connection | None, query: Any) -> dict[str, Any] | None:
    if conn is None:
        with plane.db.connect() as own:
            row = own.execute(query).mappings().first()
    else:
        row = conn.execute(query).mappings().first()
    return None if row is None else dict(row)
