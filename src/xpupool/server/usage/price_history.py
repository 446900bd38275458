"""Prices over time (issue 52): each price table the admin sets is in force from the time it
takes effect until the next one's, and usage is priced at the table in force while it was used.

The meter prices usage as it records it (``meter.py``): a stretch of use that spans a change is
split at the change, each part priced at its own table, and the cost is added to the rollups
beside the sums. So what was recorded keeps its prices when a new table comes, and a table
takes effect now or later, never before (``services/billing.py`` refuses an earlier time). Within
one sampling interval use is taken as even, as the rollups' hour split takes it.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, select

from xpupool.catalog.accelerators import AcceleratorCatalog, load_accelerators
from xpupool.server.storage.billing import usage_price_tables


@dataclass(frozen=True, slots=True)
class Prices:
    """One price table as cost is computed from it; ``per_card_hour`` by catalog name (or the
    printed name of a model the catalog lacks); ``effective_at``: in force from then (Unix
    seconds; None: no table, everything free)."""

    currency: str = ""
    per_cu_hour: float = 0.0
    per_kwh: float = 0.0
    per_card_hour: Mapping[str, float] = field(default_factory=dict)
    catalog: AcceleratorCatalog | None = None
    effective_at: float | None = None
    updated_at: float | None = None
    source: Mapping[str, Any] = field(default_factory=dict)  # the table as the admin gave it
    _by_printed: dict[str, float] = field(default_factory=dict)  # card_hour's cache

    @classmethod
    def of(
        cls,
        table: Mapping[str, Any],
        catalog: AcceleratorCatalog,
        effective_at: float | None = None,
        updated_at: float | None = None,
    ) -> Prices:
        """The stored table (``schemas/billing.py`` PriceTable as a dict), models by catalog name."""
        by_name: dict[str, float] = {}
        for price in table.get("models") or ():
            known = catalog.lookup(str(price["model"]))
            by_name[known.name if known is not None else str(price["model"])] = float(
                price["per_card_hour"]
            )
        return cls(
            str(table.get("currency") or ""),
            float(table.get("per_compute_unit_hour") or 0.0),
            float(table.get("per_kwh") or 0.0),
            by_name,
            catalog,
            effective_at,
            updated_at,
            dict(table),
        )

    def card_hour(self, printed: str) -> float:
        """The price of a card-hour of the model a probe names ``printed`` (0: none given)."""
        if not self.per_card_hour:
            return 0.0
        found = self._by_printed.get(printed)
        if found is None:
            known = self.catalog.lookup(printed) if self.catalog is not None else None
            found = self.per_card_hour.get(known.name if known is not None else printed, 0.0)
            self._by_printed[printed] = found
        return found

    def cost(self, model: str, device_s: float, cu_s: float, energy_j: float) -> float:
        return (
            device_s / 3600.0 * self.card_hour(model)
            + cu_s / 3600.0 * self.per_cu_hour
            + energy_j / 3.6e6 * self.per_kwh
        )


@dataclass(frozen=True, slots=True)
class PriceSchedule:
    """The price tables by the time each takes effect (ascending); none: nothing is priced."""

    times: tuple[float, ...] = ()
    tables: tuple[Prices, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.times)

    def at(self, t: float) -> Prices | None:
        """The table in force at ``t`` (None: before the first one)."""
        i = bisect.bisect_right(self.times, t) - 1
        return self.tables[i] if i >= 0 else None

    def pieces(self, start: float, end: float) -> list[tuple[float, float, Prices | None]]:
        """[start, end) cut at every change inside it: (from, to, the table in force)."""
        lo = bisect.bisect_right(self.times, start)
        hi = bisect.bisect_left(self.times, end)
        if lo >= hi:  # no change inside: the one table in force at start
            return [(start, end, self.tables[lo - 1] if lo > 0 else None)]
        cuts = [start, *self.times[lo:hi], end]
        return [(a, b, self.at(a)) for a, b in itertools.pairwise(cuts)]


def read_schedule(conn: Connection, catalog: AcceleratorCatalog) -> PriceSchedule:
    """Every stored table, in the order they take effect."""
    t = usage_price_tables
    rows = conn.execute(select(t).order_by(t.c.effective_at)).mappings().all()
    tables = tuple(
        Prices.of(r["prices"], catalog, float(r["effective_at"]), float(r["updated_at"]))
        for r in rows
    )
    return PriceSchedule(tuple(float(r["effective_at"]) for r in rows), tables)


def price_terms(table: Mapping[str, Any], model: str) -> tuple[float, float, float]:
    """(per card-hour of ``model``, per compute-unit-hour, per kWh) of a stored table: what an
    older store's single table (``storage/billing.py`` :func:`move_single_table`) prices its
    rollups at, by the packaged catalog as the older release did."""
    prices = Prices.of(table, load_accelerators())
    return prices.card_hour(model), prices.per_cu_hour, prices.per_kwh
