"""The fleet overview page: totals per site and per vendor/model, stranded capacity, pending
jobs by reason, and the history charts; its live part is a fragment the page polls."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from xpupool.model.errors import RequestError
from xpupool.server.plane import ControlPlane
from xpupool.server.web import data
from xpupool.server.web.charts import bar_chart, sparkline
from xpupool.server.web.render import page
from xpupool.server.web.viewer import PlaneDep, Viewer, ViewerDep

router = APIRouter(include_in_schema=False)
SUMMED = (
    "devices_total",
    "devices_allocated",
    "devices_busy",
    "memory_mib_total",
    "memory_mib_allocated",
    "memory_mib_used",
    "core_pct_total",
    "core_pct_allocated",
    "core_pct_used",
    "power_w",
    "cordoned",
    "unhealthy",
    "devices_reporting",
)


def _sum_by(groups: list[dict[str, Any]], *keys: str) -> list[dict[str, Any]]:
    """The groups summed over everything but ``keys``, sorted by them. A reading no group has
    (null in every one: no agent reported it) stays null, shown as absent rather than as 0."""
    out: dict[tuple[str, ...], dict[str, Any]] = {}
    for g in groups:
        k = tuple(str(g[key]) for key in keys)
        row = out.setdefault(k, {**dict(zip(keys, k, strict=True)), **dict.fromkeys(SUMMED)})
        for f in SUMMED:
            if g.get(f) is not None:
                row[f] = (row[f] or 0) + g[f]
    return [out[k] for k in sorted(out)]


def live_context(plane: ControlPlane, viewer: Viewer) -> dict[str, Any]:
    ov = data.overview(plane, viewer.principal)
    groups = list(ov["groups"])
    by_site = _sum_by(groups, "site")
    totals = _sum_by(groups)[0] if groups else dict.fromkeys(SUMMED, 0)
    facts = {s.name: s for s in data.sites(plane)}  # as GET /v1/sites and `xpupool sites`
    for row in by_site:  # the stranded capacity of each site, beside its totals
        row["stranded"] = ov["stranded"].get("by_site", {}).get(row["site"])
        row["facts"] = facts.get(row["site"])
    return {
        "ov": ov,
        "totals": totals,
        "by_site": by_site,
        "by_model": _sum_by(groups, "vendor", "device_model"),
        "site_chart": bar_chart([(r["site"], r["devices_allocated"]) for r in by_site]),
        "reason_chart": bar_chart(list(ov["pending_by_reason"].items())),
    }


@router.get("/", response_class=HTMLResponse)
def overview_page(
    request: Request,
    plane: PlaneDep,
    viewer: ViewerDep,
    window: Annotated[str, Query(pattern="^(1h|1d|1w)$")] = "1h",
    site: Annotated[str, Query(max_length=63)] = "",
    model: Annotated[str, Query(max_length=200)] = "",
) -> HTMLResponse:
    ctx = live_context(plane, viewer)
    try:
        hist = data.history(plane, window, site or None, model or None)
    except RequestError as exc:  # a site or model the pool and its history do not know
        hist = {"window": window, "step_s": 0, "series": [], "error": f"{exc.field}: {exc.reason}"}
    rows = [
        {**s, "spark": sparkline([(p[0], p[1]) for p in s.get("points", [])], 240, 40)}
        for s in hist.get("series", [])[:40]  # bounded: the page stays small at any fleet size
    ]
    return page(
        request,
        viewer,
        "overview.html",
        **ctx,
        history=hist,
        history_rows=rows,
        window=window,
        site=site,
        model=model,
        sites=sorted({g["site"] for g in ctx["ov"]["groups"]}),
        models=sorted({g["device_model"] for g in ctx["ov"]["groups"]}),
    )


@router.get("/ui/overview", response_class=HTMLResponse)
def overview_fragment(request: Request, plane: PlaneDep, viewer: ViewerDep) -> HTMLResponse:
    return page(request, viewer, "overview_live.html", **live_context(plane, viewer))
