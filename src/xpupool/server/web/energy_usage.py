"""The usage page's energy section: the cards' energy per site and per card model over time
(issue 55), from the one usage query's answer by ``site,model`` (``server/usage/query.py``, what
``GET /v1/usage?by=site,model`` returns), so that the page's kWh are the API's, a tenant's its
own. Each series is the answer's rows summed over the other label: one query gives both lists."""

from __future__ import annotations

from dataclasses import dataclass

from xpupool.server.schemas.usage import UsageAnswer
from xpupool.server.web.charts import Spark, sparkline

JOULES_PER_KWH = 3.6e6
SHOWN = 40  # sites and models listed: the page stays small at any pool size


@dataclass(frozen=True, slots=True)
class EnergySeries:
    """One site's or card model's kWh per bucket of the window, and their sum."""

    name: str
    kwh: float
    spark: Spark


def energy_over_time(answer: UsageAnswer, label: str) -> list[EnergySeries]:
    """Per value of ``label`` (``site`` or ``model``) of ``answer`` (asked by ``site,model``):
    kWh per bucket as a sparkline and the window's kWh, most first (at most :data:`SHOWN`);
    a value with no energy in the window is left out."""
    points: dict[str, dict[float, float]] = {}
    for row in answer.rows:
        name = str(getattr(row, label) or "")
        buckets = points.setdefault(name, {})
        buckets[row.start] = buckets.get(row.start, 0.0) + row.energy_j / JOULES_PER_KWH
    out = [
        EnergySeries(name, sum(b.values()), sparkline(sorted(b.items()), 240, 40))
        for name, b in points.items()
        if sum(b.values()) > 0
    ]
    return sorted(out, key=lambda s: (-s.kwh, s.name))[:SHOWN]
