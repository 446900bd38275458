"""Prices and budgets (issue 52): what usage costs, what each tenant has spent in its budget's
period, and what a new job of a tenant that spent its budget gets at admission.

Cost is usage at the prices of the table in force as it was used (``price_history.py``):
card-hours by share x the model's price per card-hour, plus compute-unit-hours x the price per
unit-hour, plus kWh x the price per kWh; the meter adds it to the rollups as it records. Spend
is the cost in the day and month rollups (``storage/usage.py``) and changes only when the meter
flushes, so it is computed once per tenant per flush (and per price or budget change), not per
submission: admission pays a dict lookup.

A budget's policy applies while spend has reached its amount: ``warn`` admits the job with an
event saying so and counts it (``xpupool_budget_exceeded_jobs_total``); ``lower-priority``
admits it at the budget's ``lowered_priority`` at most, with an event; ``refuse`` refuses it
(:class:`NotGranted`, 403) with the budget and the figures, storing nothing.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from sqlalchemy import Connection, Engine, func, select

from xpupool.model.errors import NotFound, NotGranted
from xpupool.server.schemas.billing import Budget, PriceAnswer
from xpupool.server.storage.billing import usage_budgets
from xpupool.server.storage.usage import usage_rollups
from xpupool.server.usage.buckets import month_start, next_month
from xpupool.server.usage.price_history import Prices, PriceSchedule, read_schedule

if TYPE_CHECKING:
    from xpupool.server.usage.meter import UsageMeter

_DAY = 86400.0


class ControlPlane(Protocol):
    """What billing reads of the plane (``server/plane/control.py``, which holds the one
    :class:`Billing`): the plane imports this module, so it names no plane type."""

    db: Engine
    meter: UsageMeter

    def clock(self) -> float: ...


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
        self._schedule: PriceSchedule | None = None
        self._budgets: dict[str, Any] | None = None
        self._spent: dict[tuple[str, float], tuple[int, float]] = {}  # -> (flush, spend)
        # moved by every forget: a read begun before a change keeps nothing of what it read
        self._generation = 0
        self.exceeded: dict[tuple[str, str], int] = {}  # (tenant, policy) -> jobs admitted over

    def forget(self) -> None:
        with self._lock:
            self._generation += 1
            self._schedule = None
            self._budgets = None
            self._spent = {}

    # ---- reads
    def schedule(self, plane: ControlPlane, conn: Connection | None = None) -> PriceSchedule:
        """Every price table by the time it takes effect (``price_history.py``)."""
        found = self._schedule
        if found is None:
            generation = self._generation
            catalog = plane.meter.power.catalog
            if conn is None:
                with plane.db.connect() as own:
                    found = read_schedule(own, catalog)
            else:
                found = read_schedule(conn, catalog)
            with self._lock:
                if generation == self._generation:
                    self._schedule = found
        return found

    def prices(self, plane: ControlPlane, conn: Connection | None = None) -> Prices:
        """The table in force now (the first one to come while none is yet; empty: none)."""
        schedule = self.schedule(plane, conn)
        found = schedule.at(plane.clock())
        if found is None:
            return schedule.tables[0] if schedule else Prices()
        return found

    def priced(self, plane: ControlPlane) -> bool:
        """Whether the admin has set a price table (else usage shows no cost)."""
        return bool(self.schedule(plane))

    def price_answer(self, plane: ControlPlane, at: float | None = None) -> PriceAnswer:
        """The table in force at ``at`` (default now); empty with no effective time before the
        first one."""
        found = self.schedule(plane).at(plane.clock() if at is None else at)
        return PriceAnswer.model_validate({} if found is None else _answer(found))

    def price_history(self, plane: ControlPlane) -> list[PriceAnswer]:
        """Every table, in the order they take effect (those still to come included)."""
        return [PriceAnswer.model_validate(_answer(p)) for p in self.schedule(plane).tables]

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
        r = usage_rollups
        step = "month" if end - start > 7 * _DAY else "day"
        query = select(func.sum(r.c.cost)).where(
            r.c.step == step, r.c.tenant == tenant, r.c.bucket >= start, r.c.bucket < end
        )
        if conn is None:
            with plane.db.connect() as own:
                total = own.execute(query).scalar()
        else:
            total = conn.execute(query).scalar()
        value = float(total or 0.0)
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


def _answer(prices: Prices) -> dict[str, Any]:
    return {**prices.source, "effective_at": prices.effective_at, "updated_at": prices.updated_at}
