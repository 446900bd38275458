"""The one power model and the one compute normalisation of a card model (issue 52; issue 55
reuses both).

Power: a card draws ``idle_watts`` with nothing running and ``tdp_watts`` (its board power) when
fully busy, linearly in between by its reported utilisation; a live reading of the card's own
power, when its agent sends one, is preferred to the model. The idle figure is, first, the
operator's override; then what the pool measured of the model's own cards while they held nothing
(:meth:`PowerModel.learn_idle`, fed by ``server/usage/idle_power.py``); then the catalog's
sourced stand-in. A model with none of them is taken to idle at 0 W, so its energy is a lower
bound that scales with utilisation alone; a model with no board power has no modelled energy
(0 W) and counts only what its agent reads.

Compute units: one card-second of a model is worth its dense BF16 TFLOPS (FP16 where the part
has no BF16 figure) compute-unit-seconds, so an A100-hour and a 910B-hour can be added. Both
figures come from ``data/accelerators.yaml`` (each with its source) and may be overridden per
model by the operator's catalog file (``accelerators:`` section, :func:`parse_overrides`): one
table of figures, read by metering and by anything that weighs cards against each other.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from xpupool.catalog._data_file import Entry, line_of
from xpupool.catalog.accelerators import AcceleratorCatalog, load_accelerators

IdleSource = Literal["operator", "measured", "catalog", "none"]
"""Where a model's idle figure comes from (:meth:`PowerModel.idle_source`)."""

_OVERRIDE_FIELDS = frozenset({"name", "compute_units", "idle_watts", "busy_watts"})


@dataclass(frozen=True, slots=True)
class CardFigures:
    """What a card model is worth: ``compute_units`` per card (0: unknown, nothing counted),
    ``idle_watts`` and ``busy_watts`` (0: unknown)."""

    compute_units: float
    idle_watts: float
    busy_watts: float

    def watts(self, util_pct: float | None, sampled_w: float | None = None) -> float:
        """The card's power: ``sampled_w`` when its agent read one; else idle + (busy - idle)
        x utilisation (``util_pct`` 0..100, clamped; None counts as fully busy: a held card
        whose use nobody reports is charged as working)."""
        if sampled_w is not None and sampled_w >= 0:
            return float(sampled_w)
        busy = 1.0 if util_pct is None else min(max(util_pct, 0.0), 100.0) / 100.0
        return self.idle_watts + (self.busy_watts - self.idle_watts) * busy


UNKNOWN = CardFigures(0.0, 0.0, 0.0)


@dataclass(frozen=True, slots=True)
class Override:
    """An operator's figures for one model (None: keep the catalog's)."""

    name: str
    compute_units: float | None = None
    idle_watts: float | None = None
    busy_watts: float | None = None


class PowerModel:
    """Figures per card model, by the name a probe prints (``NVIDIA A100-SXM4-80GB``): the
    catalog's, then the operator's overrides. Lookups are cached per printed name."""

    def __init__(
        self, catalog: AcceleratorCatalog | None = None, overrides: tuple[Override, ...] = ()
    ) -> None:
        self.catalog = catalog or load_accelerators()
        self._overrides = {self._key(o.name): o for o in overrides}
        self._measured: dict[str, float] = {}  # idle watts learned, by catalog name
        self._cache: dict[str, CardFigures] = {}

    def learn_idle(self, measured: Mapping[str, float]) -> None:
        """The idle watts measured per model (by printed or catalog name) from its cards' own
        readings: used instead of the catalog's figure (an operator's override still first).
        Replaces what was learned before."""
        self._measured = {self._key(k): float(v) for k, v in measured.items() if v >= 0}
        self._cache = {}

    def with_overrides(self, overrides: tuple[Override, ...] = ()) -> PowerModel:
        """A new model with this one's figures (its overrides, the idle watts it learned) and
        ``overrides`` over them, figure by figure. It learns nothing this one learns later: a
        snapshot that another thread may read while this one learns (the plane hands one to its
        engine's energy scorer, ``server/plane/control.py`` ``use_power``)."""
        merged = dict(self._overrides)
        for over in overrides:
            key = self._key(over.name)
            kept = merged.get(key, Override(key))
            merged[key] = Override(
                key,
                kept.compute_units if over.compute_units is None else over.compute_units,
                kept.idle_watts if over.idle_watts is None else over.idle_watts,
                kept.busy_watts if over.busy_watts is None else over.busy_watts,
            )
        out = PowerModel(self.catalog, tuple(merged.values()))
        out._measured = dict(self._measured)
        return out

    def idle_source(self, printed: str) -> IdleSource:
        """Where the model's idle figure comes from: 'operator', 'measured', 'catalog' or 'none'
        (taken as 0 W)."""
        key = self._key(printed)
        over = self._overrides.get(key)
        if over is not None and over.idle_watts is not None:
            return "operator"
        if key in self._measured:
            return "measured"
        model = self.catalog.lookup(printed)
        return "catalog" if model is not None and model.idle_watts is not None else "none"

    def _key(self, name: str) -> str:
        model = self.catalog.lookup(name)
        return model.name if model is not None else name

    def figures(self, printed: str) -> CardFigures:
        """The figures of the model a probe names ``printed``; :data:`UNKNOWN` for a name
        neither the catalog nor the operator knows."""
        found = self._cache.get(printed)
        if found is not None:
            return found
        model = self.catalog.lookup(printed)
        units = idle = busy = 0.0
        if model is not None:
            units = model.bf16_tflops or model.fp16_tflops or 0.0
            idle = model.idle_watts or 0.0
            busy = float(model.tdp_watts or 0)
        key = model.name if model is not None else printed
        idle = self._measured.get(key, idle)
        over = self._overrides.get(key)
        if over is not None:
            units = units if over.compute_units is None else over.compute_units
            idle = idle if over.idle_watts is None else over.idle_watts
            busy = busy if over.busy_watts is None else over.busy_watts
        found = CardFigures(units, min(idle, busy) if busy else idle, busy)
        self._cache[printed] = found
        return found

    def compute_units(self, printed: str) -> float:
        return self.figures(printed).compute_units

    def watts(self, printed: str, util_pct: float | None, sampled_w: float | None = None) -> float:
        return self.figures(printed).watts(util_pct, sampled_w)


def parse_overrides(label: str, top: Entry, field: str) -> tuple[Override, ...]:
    """The operator file's ``accelerators:`` section: a list of ``{name, compute_units,
    idle_watts, busy_watts}`` (each figure optional, positive). ``name`` must be a catalog
    model (by name or alias) or a name a probe prints for a card the catalog lacks; a model
    given twice is an error naming the entry."""
    items = top.raw(field)
    if not isinstance(items, list) or not items:
        raise top.error(field, "expected a non-empty list of {name, compute_units, ...}")
    catalog = load_accelerators()
    out: list[Override] = []
    seen: set[str] = set()
    for index, item in enumerate(items):
        name = item.get("name") if isinstance(item, Mapping) else None
        where = f"{field}[{index}]" + (f" ({name})" if isinstance(name, str) else "")
        entry = Entry(label, where, item, _OVERRIDE_FIELDS, line_of(items, index))
        text = entry.text("name")
        model = catalog.lookup(text)
        key = model.name if model is not None else text
        if key in seen:
            raise entry.error("name", f"model {key!r} is given twice")
        seen.add(key)
        figures = {
            f: entry.number(f, nullable=False) if f in entry.data else None
            for f in ("compute_units", "idle_watts", "busy_watts")
        }
        if all(v is None for v in figures.values()):
            raise entry.error("name", "give compute_units, idle_watts or busy_watts")
        idle, busy = figures["idle_watts"], figures["busy_watts"]
        if idle is not None and busy is not None and idle > busy:
            raise entry.error("idle_watts", f"{idle:g} W is above busy_watts {busy:g} W")
        out.append(Override(key, figures["compute_units"], idle, busy))
    return tuple(out)
