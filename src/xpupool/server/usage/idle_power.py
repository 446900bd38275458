"""What each card model draws idle, learned from the pool's own cards (issue 52): the catalog's
idle figure is a stand-in (a datasheet, a review), and a card's idle draw depends on its clocks,
its driver's power state and its cooling, so the pool measures it.

At each usage flush the meter hands over the power its agents last read of every usable card
that holds nothing (no memory, compute or task slot of any replica: ``power_saving.held_cards``).
Per model, the readings of the last ``window_s`` are kept (at most ``max_samples``, the oldest
dropped) and the model's idle figure is their ``percentile`` (a low one: a card reported idle a
moment after a job ended may still read busy, and the lowest readings are what the card draws
when left alone), once at least ``min_samples`` are there. The figures are stored
(``storage/usage.py`` ``usage_idle_power``), so a restart keeps them, and handed to the one
power model (``catalog/power.py`` :meth:`~xpupool.catalog.power.PowerModel.learn_idle`), which
uses them where it used the catalog's figure; the catalog's stays the fallback.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

import numpy as np
from sqlalchemy import Connection, select

from xpupool.catalog.accelerators import AcceleratorCatalog
from xpupool.engine.state import ClusterState
from xpupool.server.power_saving import held_cards
from xpupool.server.storage.driver_insert import insert_rows
from xpupool.server.storage.usage import usage_idle_power

DEFAULT_WINDOW_S = 86400.0
DEFAULT_PERCENTILE = 5.0
DEFAULT_MIN_SAMPLES = 20
DEFAULT_MAX_SAMPLES = 10_000


class Metrics(Protocol):
    """What is read of a card's last readings (``DeviceMetrics``)."""

    @property
    def power_w(self) -> float | None: ...


def idle_readings(
    state: ClusterState, metrics: Callable[[str], Metrics | None]
) -> list[tuple[str, float]]:
    """(printed model, watts) of each usable card holding nothing whose agent read its power
    (under the plane's lock: one state of the pool)."""
    idle = state.dev_present & state.dev_usable & ~held_cards(state)
    out: list[tuple[str, float]] = []
    for n, col in zip(*np.nonzero(idle), strict=True):
        dev = state.nodes[n].devices[col]
        m = metrics(dev.uuid)
        if m is not None and m.power_w is not None and math.isfinite(m.power_w) and m.power_w >= 0:
            out.append((dev.model, float(m.power_w)))
    return out


class IdlePower:
    """Readings per model over a window and the figures taken from them (see the module)."""

    def __init__(
        self,
        catalog: AcceleratorCatalog,
        window_s: float = DEFAULT_WINDOW_S,
        percentile: float = DEFAULT_PERCENTILE,
        min_samples: int = DEFAULT_MIN_SAMPLES,
        max_samples: int = DEFAULT_MAX_SAMPLES,
    ) -> None:
        self.catalog = catalog
        self.window_s = window_s
        self.percentile = percentile
        self.min_samples = min_samples
        self.max_samples = max_samples
        self._readings: dict[str, deque[tuple[float, float]]] = {}
        self.figures: dict[str, tuple[float, int]] = {}  # model -> (watts, readings)
        self.seeded = False

    def key(self, printed: str) -> str:
        model = self.catalog.lookup(printed)
        return model.name if model is not None else printed

    def seed(self, conn: Connection) -> None:
        """The stored figures (a restart keeps what was learned; new readings replace them)."""
        t = usage_idle_power
        for model, watts, samples in conn.execute(select(t.c.model, t.c.watts, t.c.samples)):
            self.figures[str(model)] = (float(watts), int(samples))
        self.seeded = True

    def observe(self, readings: Iterable[tuple[str, float]], now: float) -> dict[str, float]:
        """Add one look's readings taken ``now``; returns the models whose figure changed, with
        the new figure."""
        touched: set[str] = set()
        for printed, watts in readings:
            key = self.key(printed)
            kept = self._readings.get(key)
            if kept is None:
                kept = self._readings[key] = deque(maxlen=self.max_samples)
            kept.append((now, watts))
            touched.add(key)
        changed: dict[str, float] = {}
        for key in touched:
            kept = self._readings[key]
            while kept and kept[0][0] < now - self.window_s:
                kept.popleft()
            if len(kept) < self.min_samples:
                continue
            watts = float(np.percentile([w for _t, w in kept], self.percentile))
            if self.figures.get(key, (None, 0))[0] != watts:
                changed[key] = watts
            self.figures[key] = (watts, len(kept))
        return changed

    def watts(self) -> Mapping[str, float]:
        return {k: w for k, (w, _n) in self.figures.items()}


def store(conn: Connection, figures: Mapping[str, tuple[float, int]], now: float) -> None:
    """Write ``figures`` (model -> (watts, readings)) over the stored ones."""
    t = usage_idle_power
    if not figures:
        return
    conn.execute(t.delete().where(t.c.model.in_(list(figures))))
    insert_rows(
        conn,
        t,
        [
            {"model": m, "watts": w, "samples": n, "updated_at": now}
            for m, (w, n) in sorted(figures.items())
        ],
    )
