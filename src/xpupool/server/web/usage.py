"""The usage page: what each tenant used per day (or hour, or month) over a window, per card
model, and what it cost at the admin's prices, with the viewer's budget, and the cards' energy per
site and per model over time (``energy_usage.py``). Read through the one
usage query (``server/usage/query.py``), so a tenant sees its own rows only, as in the API, and
every chart's numbers are in a table beside it."""

from __future__ import annotations

import time
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from xpupool.model.errors import NotFound
from xpupool.server.plane import ControlPlane
from xpupool.server.services import billing
from xpupool.server.usage import query
from xpupool.server.web.charts import bar_chart, sparkline
from xpupool.server.web.energy_usage import energy_over_time
from xpupool.server.web.render import page
from xpupool.server.web.viewer import PlaneDep, Viewer, ViewerDep

router = APIRouter(include_in_schema=False)
WINDOWS = {"1d": (86400.0, "hour"), "1w": (7 * 86400.0, "day"), "30d": (30 * 86400.0, "day")}
"""Window -> (seconds back from now, step of the per-tenant series)."""
SHOWN = 40  # tenants and models listed: the page stays small at any pool size


def _over_time(answer: Any) -> list[dict[str, Any]]:
    """Per tenant: card-hours per bucket (a sparkline) and the window's sums."""
    tenants: dict[str, dict[str, Any]] = {}
    for r in answer.rows:
        t = tenants.setdefault(
            str(r.tenant), {"name": str(r.tenant), "points": [], "hours": 0.0, "cost": None}
        )
        t["points"].append((r.start, r.device_seconds / 3600.0))
        t["hours"] += r.device_seconds / 3600.0
        if r.cost is not None:
            t["cost"] = (t["cost"] or 0.0) + r.cost
    ranked = sorted(tenants.values(), key=lambda t: (-t["hours"], t["name"]))[:SHOWN]
    for t in ranked:
        t["spark"] = sparkline(t["points"], 240, 40)
    return ranked


def usage_context(plane: ControlPlane, viewer: Viewer, window: str) -> dict[str, Any]:
    back, step = WINDOWS[window]
    to = plane.clock()
    since = max(to - back, 0.0)
    frm = str(since)
    who = viewer.principal
    series = query.usage(plane, who, "tenant", frm, str(to), step)
    by_model = query.usage(plane, who, "model", frm, str(to), "month")
    by_place = query.usage(plane, who, "site,model", frm, str(to), step)  # energy over time
    models: dict[str, dict[str, float | None]] = {}
    for r in by_model.rows:
        m = models.setdefault(
            str(r.model), {"hours": 0.0, "cu_hours": 0.0, "kwh": 0.0, "cost": None}
        )
        m["hours"] = (m["hours"] or 0.0) + r.device_seconds / 3600.0
        m["cu_hours"] = (m["cu_hours"] or 0.0) + r.compute_unit_seconds / 3600.0
        m["kwh"] = (m["kwh"] or 0.0) + r.energy_j / 3.6e6
        if r.cost is not None:
            m["cost"] = (m["cost"] or 0.0) + r.cost
    model_rows = sorted(models.items(), key=lambda kv: (-(kv[1]["hours"] or 0.0), kv[0]))[:SHOWN]
    tenants = _over_time(series)
    budget = None
    if not viewer.is_admin and who.tenant is not None:
        try:
            budget = billing.budget(plane, who.tenant, who)
        except NotFound:
            budget = None
    return {
        "window": window,
        "step": step,
        "currency": series.currency,
        "tenants": tenants,
        "models": model_rows,
        "model_chart": bar_chart([(name, m["hours"] or 0.0) for name, m in model_rows]),
        "cost_chart": bar_chart([(t["name"], t["cost"] or 0.0) for t in tenants])
        if series.currency is not None
        else None,
        "budget": budget,
        "energy_sites": energy_over_time(by_place, "site"),
        "energy_models": energy_over_time(by_place, "model"),
        "since": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(since)),
    }


@router.get("/usage", response_class=HTMLResponse)
def usage_page(
    request: Request,
    plane: PlaneDep,
    viewer: ViewerDep,
    window: Annotated[str, Query(pattern="^(1d|1w|30d)$")] = "30d",
) -> HTMLResponse:
    return page(request, viewer, "usage.html", **usage_context(plane, viewer, window))
