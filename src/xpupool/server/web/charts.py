"""Server-drawn SVG geometry: bars and sparklines as numbers a template turns into shapes.

Only numbers leave this module (coordinates, sizes); labels are passed to the template as text
and escaped there, so a chart cannot carry markup. Each chart's numbers are also on the page as
a table: the picture is never the only way to read them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

BAR_WIDTH = 320.0  # px of the longest bar
BAR_HEIGHT = 18.0
BAR_GAP = 6.0


@dataclass(frozen=True, slots=True)
class Bar:
    label: str
    value: float
    y: float
    width: float  # px, value scaled so that the largest bar is BAR_WIDTH


@dataclass(frozen=True, slots=True)
class BarChart:
    bars: list[Bar]
    height: float
    width: float = BAR_WIDTH


def bar_chart(rows: Sequence[tuple[str, float]], limit: int = 20) -> BarChart:
    """The first ``limit`` of ``(label, value)`` as horizontal bars, scaled to the largest."""
    shown = list(rows)[:limit]
    top = max((v for _, v in shown), default=0.0) or 1.0
    bars = [
        Bar(label, value, i * (BAR_HEIGHT + BAR_GAP), max(0.0, value) / top * BAR_WIDTH)
        for i, (label, value) in enumerate(shown)
    ]
    return BarChart(bars, max(BAR_HEIGHT, len(bars) * (BAR_HEIGHT + BAR_GAP)))


@dataclass(frozen=True, slots=True)
class Spark:
    points: str  # "x,y x,y ..." for <polyline points>
    width: float
    height: float
    low: float | None  # None: no samples
    high: float | None
    last: float | None


def sparkline(
    samples: Sequence[tuple[float, float]], width: float = 160.0, height: float = 32.0
) -> Spark:
    """``(t, value)`` samples as a polyline in a ``width`` x ``height`` box, time left to right,
    low values at the bottom; one sample draws a flat line, none an empty one."""
    pts = sorted((float(t), float(v)) for t, v in samples)
    if not pts:
        return Spark("", width, height, None, None, None)
    t0, t1 = pts[0][0], pts[-1][0]
    lo, hi = min(v for _, v in pts), max(v for _, v in pts)
    span_t, span_v = (t1 - t0) or 1.0, (hi - lo) or 1.0
    if len(pts) == 1:
        pts = [(t0 - 1.0, pts[0][1]), (t0, pts[0][1])]
        t0, span_t = t0 - 1.0, 1.0
    coords = " ".join(
        f"{(t - t0) / span_t * width:.1f},{height - 2 - (v - lo) / span_v * (height - 4):.1f}"
        for t, v in pts
    )
    return Spark(coords, width, height, lo, hi, pts[-1][1])
