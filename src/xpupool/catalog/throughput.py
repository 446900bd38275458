"""How fast a kind of job runs on each card model: measured, declared, or estimated, and which.

The throughput policy (``engine/scorers/throughput.py``) needs, per job, a relative speed per card
model (``Request.speeds``). This module decides those numbers from three sources, in order:

* **measured**: rates a job of the same kind reported while it ran (steps or tokens per second),
  averaged per (kind, card model) in a :class:`ThroughputTable`; used once two or more card models
  have been measured for the kind, since only ratios between cards matter;
* **declared**: the job's own ``speed=A100:1.0,910B3:0.7``;
* **estimated**: a roofline guess from the catalog, ``min(peak TFLOPS, intensity x memory
  bandwidth)``, where the arithmetic intensity (FLOP per byte moved) comes from the job's kind
  (:data:`KIND_INTENSITY`; a decoding LLM is bound by bandwidth, a convolutional network by
  compute). Marked estimated wherever it is shown.

A card model the chosen source does not cover gets the estimate scaled onto that source (by the
mean ratio on the models both cover), marked estimated. A job's kind is its ``kind=``, else its
image, else its model name (:func:`job_kind`). Pure: the server keeps the table and feeds it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from xpupool.catalog.accelerators import AcceleratorModel

# FLOP per byte of memory traffic by kind keyword (lower-case substring of the kind), first match
# wins. Rough orders of magnitude for the roofline: decode reads every weight per token (about 1-2
# FLOP/byte at batch 1); recommendation models are embedding lookups; transformer and LM training
# at common batch sizes sit near the ridge of V100-class cards; convolutions far above it.
KIND_INTENSITY: tuple[tuple[str, float], ...] = (
    ("decode", 2.0),
    ("serve", 2.0),
    ("recommendation", 4.0),
    ("a3c", 10.0),
    ("lm", 40.0),
    ("transformer", 60.0),
    ("cyclegan", 80.0),
    ("resnet", 150.0),
    ("cnn", 150.0),
)
DEFAULT_INTENSITY = 60.0  # a kind we know nothing of: a transformer-like mix


class Source(StrEnum):
    MEASURED = "measured"
    DECLARED = "declared"
    ESTIMATED = "estimated"


@dataclass(frozen=True, slots=True)
class CardSpeed:
    """A job's expected speed on one card model, relative to its best card (1.0), where the figure
    came from and, when measured, from how many runs."""

    model: str
    speed: float
    source: Source
    runs: int = 0


def job_kind(kind: str | None, image: str | None = None, model: str | None = None) -> str | None:
    """The kind under which a job's speeds are learned: ``kind=``, else its image without the tag,
    else the served model's name; None when it has none of them."""
    if kind:
        return kind
    if image:
        return image.rsplit("@", 1)[0].rsplit(":", 1)[0] if "/" in image else image.split(":")[0]
    return model or None


def intensity_of(kind: str | None) -> float:
    text = (kind or "").lower()
    for keyword, flop_per_byte in KIND_INTENSITY:
        if keyword in text:
            return flop_per_byte
    return DEFAULT_INTENSITY


def roofline_tflops(card: AcceleratorModel, kind: str | None) -> float | None:
    """Attainable TFLOPS of ``card`` for ``kind``: min(peak, intensity x bandwidth); None when the
    catalog gives neither a peak nor a bandwidth for it."""
    peak = card.fp16_tflops or card.bf16_tflops
    bandwidth = card.memory_bandwidth_gbps
    if peak is None and bandwidth is None:
        return None
    bound = intensity_of(kind) * bandwidth / 1000.0 if bandwidth else math.inf
    return min(peak if peak is not None else math.inf, bound)


REPORT_WINDOW = 20
"""A measured figure is the mean of about its last this many reports (the plain mean up to
then): a job type's speed follows a new image or driver rather than its first week."""
MAX_STEP = 10.0
"""A report further than this factor from a figure counts as this factor away: one report (a
job that writes nonsense) moves a figure at most ``MAX_STEP / REPORT_WINDOW`` of the way."""


@dataclass(frozen=True, slots=True)
class Measured:
    """A measured figure: the rate (windowed mean), the runs that reported it and the reports."""

    rate: float
    runs: int
    reports: int


class ThroughputTable:
    """Measured rates per (kind, card model): a windowed mean of the reports, and how many runs
    and reports it comes from. Rates are in whatever unit the kind's jobs report (steps/s,
    tokens/s); only ratios between cards are used."""

    def __init__(self) -> None:
        self._rows: dict[str, dict[str, Measured]] = {}  # kind -> card model -> figure

    def record(self, kind: str, model: str, rate: float) -> Measured:
        """One run's rate (its first report); see :meth:`report`."""
        return self.report(kind, model, rate, new_run=True)

    def report(self, kind: str, model: str, rate: float, *, new_run: bool) -> Measured:
        """A rate reported by a run of ``kind`` on ``model`` (``new_run``: the run's first), the
        figure it makes. A non-finite or non-positive rate is refused (ValueError); one more
        than :data:`MAX_STEP` times off the figure is clipped to that."""
        if not math.isfinite(rate) or rate <= 0:
            raise ValueError(f"rate must be finite and > 0, not {rate!r}")
        old = self.get(kind, model)
        if old is None:
            row = Measured(rate, 1, 1)
        else:
            clipped = min(max(rate, old.rate / MAX_STEP), old.rate * MAX_STEP)
            weight = min(old.reports + 1, REPORT_WINDOW)
            mean = old.rate + (clipped - old.rate) / weight
            row = Measured(mean, old.runs + int(new_run), old.reports + 1)
        self.put(kind, model, row)
        return row

    def put(self, kind: str, model: str, row: Measured) -> None:
        """Take a figure as stored (a plane starting again)."""
        self._rows.setdefault(kind, {})[model.upper()] = row

    def get(self, kind: str, model: str) -> Measured | None:
        return self._rows.get(kind, {}).get(model.upper())

    def measured(self, kind: str) -> dict[str, tuple[float, int]]:
        """Card model (upper-case) -> (mean rate, runs) for ``kind``."""
        return {model: (row.rate, row.runs) for model, row in self._rows.get(kind, {}).items()}


def card_speeds(
    kind: str | None,
    cards: Iterable[AcceleratorModel | str],
    declared: Iterable[tuple[str, float]] = (),
    table: ThroughputTable | None = None,
    estimate: Mapping[str, float] | None = None,
) -> list[CardSpeed]:
    """The speed of a job of ``kind`` on each of ``cards`` (catalog models, or names the catalog
    does not know), best first, relative to the best (1.0); see the module docstring for the
    order of sources. ``estimate`` overrides the roofline per model name (a simulator's table).
    Cards with no figure from any source are left out."""
    names = [c if isinstance(c, str) else c.name for c in cards]
    guess: dict[str, float] = {}
    for card in cards:
        if isinstance(card, str):
            continue
        tflops = roofline_tflops(card, kind)
        if tflops:
            guess[card.name.upper()] = tflops
    for name, value in (estimate or {}).items():
        guess[name.upper()] = value
    measured = table.measured(kind) if table is not None and kind else {}
    chosen: dict[str, tuple[float, Source, int]] = {}
    if len(measured) >= 2:
        chosen = {m: (rate, Source.MEASURED, runs) for m, (rate, runs) in measured.items()}
    elif declared:
        chosen = {m.upper(): (s, Source.DECLARED, 0) for m, s in declared}
    scale = _scale(chosen, guess)
    out: dict[str, tuple[float, Source, int]] = {}
    for name in names:
        key = name.upper()
        if key in chosen:
            out[name] = chosen[key]
        elif key in guess:
            out[name] = (guess[key] * scale, Source.ESTIMATED, 0)
    if not out:
        return []
    best = max(v for v, _, _ in out.values())
    rows = [CardSpeed(n, v / best, src, runs) for n, (v, src, runs) in out.items()]
    return sorted(rows, key=lambda r: (-r.speed, r.model))


def _scale(chosen: Mapping[str, tuple[float, Source, int]], guess: Mapping[str, float]) -> float:
    """The factor that puts estimates onto the chosen source's unit: the mean ratio on the models
    both cover (1.0 when none)."""
    ratios = [chosen[m][0] / guess[m] for m in chosen if guess.get(m)]
    return sum(ratios) / len(ratios) if ratios else 1.0


def describe(speeds: Iterable[CardSpeed]) -> str:
    """``"A100: 1.0x, 910B3: 0.7x (measured, 34 runs)"``: each card's speed, and per run of
    cards from one source, where the figures came from."""
    parts: list[str] = []
    rows = list(speeds)
    for i, row in enumerate(rows):
        text = f"{row.model}: {round(row.speed, 2)}x"
        nxt = rows[i + 1] if i + 1 < len(rows) else None
        if nxt is None or nxt.source is not row.source:
            text += f" ({row.source.value}"
            runs = sum(r.runs for r in rows if r.source is Source.MEASURED)
            text += f", {runs} runs)" if row.source is Source.MEASURED else ")"
        parts.append(text)
    return ", ".join(parts)


def as_request_speeds(speeds: Iterable[CardSpeed]) -> tuple[tuple[str, float], ...]:
    """The ``Request.speeds`` form of ``speeds``."""
    return tuple((row.model, row.speed) for row in speeds)
