"""The device grid: one tile per card, grouped by site and node, a page of nodes at a time; a
card's panel (model, UUID, versions, health, its jobs and shares, a sparkline); the admin's
cordon and uncordon of nodes and cards.

Aggregate first, then drill down: the page lists the sites with their counts and shows at most
:data:`PAGE_NODES` nodes (of one site, or of all), so a 5,000-node pool is never 40,000 tiles.
Allocation is the tile's fill (tenths of the card), live utilisation its border width: two
channels, neither of them a red/green hue; cordoned (the card or its node) is a dashed outline,
unhealthy (or its node lost) a hatching, and every tile says all of it in words to a screen
reader.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from xpupool.model.errors import NotFound
from xpupool.server.auth import Principal
from xpupool.server.plane import ControlPlane
from xpupool.server.schemas.devices import Device
from xpupool.server.schemas.nodes import Node, NodeStatus
from xpupool.server.services import fleet
from xpupool.server.web import data
from xpupool.server.web.charts import sparkline
from xpupool.server.web.forms import FormDep, field
from xpupool.server.web.render import HEADERS, page
from xpupool.server.web.sessions import check_csrf
from xpupool.server.web.viewer import PlaneDep, Viewer, ViewerDep

router = APIRouter(include_in_schema=False)
PAGE_NODES = 25
SiteQ = Annotated[str, Query(max_length=63)]
PageQ = Annotated[int, Query(ge=1, le=100_000)]
CardQ = Annotated[str, Query(max_length=200)]


def _tenths(part: float, whole: float) -> int:
    return 0 if whole <= 0 else max(0, min(10, round(10 * part / whole)))


def node_closed(node: Node) -> str | None:
    """Why no card of ``node`` takes work whatever its own state: 'lost' (no heartbeat),
    'cordoned' (the admin's; the API says not schedulable while ready), else None."""
    if node.status is NodeStatus.LOST:
        return "lost"
    return None if node.schedulable else "cordoned"


def partition_words(d: Device) -> str:
    """`` partition 3g.40gb@4 of GPU-...`` for a hardware partition (no ``@`` for a vNPU); ""
    for a card."""
    if d.partition is None:
        return ""
    return f" partition {instance_words(d)} of {d.partition_of}"


def instance_words(d: Device) -> str:
    """``3g.40gb@4`` for a MIG instance, the template alone for a vNPU (cluster files' words)."""
    place = "" if d.partition_start is None else f"@{d.partition_start}"
    return f"{d.partition}{place}"


def card_layouts(devs: Sequence[Device]) -> list[dict[str, Any]]:
    """Each hardware-partitioned card among a node's ``devs``: its UUID and its instances in
    slice order, each as ``3g.40gb@0`` (a vNPU: its template) and whether work holds it (busy,
    as its tile's allocation says) or not: what a re-cut could change at a glance."""
    cards: dict[str, list[Device]] = {}
    for d in devs:
        if d.partition is not None and d.partition_of is not None:
            cards.setdefault(d.partition_of, []).append(d)
    rows = []
    for card, instances in cards.items():
        instances.sort(key=lambda d: (d.partition_start is None, d.partition_start or 0, d.uuid))
        shown = [
            {
                "words": instance_words(d),
                "busy": bool(d.jobs or d.in_use_by_others or d.allocated_memory_mib),
            }
            for d in instances
        ]
        rows.append({"card": card, "instances": shown})
    return rows


def tile(d: Device, node: Node | None = None) -> dict[str, Any]:
    """What a tile shows: its fill and border steps (0..10), its classes and its words. A card
    of a cordoned node is drawn as a cordoned card (dashed), of a lost node as an unhealthy one
    (hatched): idle or not, neither takes work, and an idle look would say it could."""
    alloc = max(
        d.allocated_memory_mib / max(d.committable_memory_mib or d.memory_mib, 1),
        d.allocated_core_permille / max(d.committable_core_permille, 1),
    )
    util = d.metrics.utilization_pct if d.metrics is not None else None
    words = [
        f"card {d.index} {d.canonical_model or d.model}{partition_words(d)}",
        f"{alloc * 100:.0f}% allocated",
        "utilisation unknown" if util is None else f"utilisation {util:.0f}%",
    ]
    a, u = _tenths(alloc, 1.0), 0 if util is None else _tenths(util, 100.0)
    classes = ["tile", f"a{a}", f"u{u}"]
    closed = None if node is None else node_closed(node)
    if d.cordoned:
        words.append("cordoned")
    if closed is not None:
        words.append(f"node {closed}")
    if d.cordoned or closed == "cordoned":
        classes.append("cordoned")
    if not d.healthy:
        words.append(f"unhealthy: {d.health_cause}" if d.health_cause else "unhealthy")
    elif d.health == "warning" and d.health_cause:
        words.append(f"warning: {d.health_cause}")
    if not d.healthy or closed == "lost":
        classes.append("unhealthy")
    return {"d": d, "a": a, "u": u, "classes": " ".join(classes), "label": ", ".join(words)}


def grid_context(plane: ControlPlane, who: Principal, site: str, page_no: int) -> dict[str, Any]:
    """A page of nodes (of ``site``, or all), each with its tiles, as ``who`` may see them; a page
    past the last is the last."""
    names = plane.node_names(site)  # by site, then by name: a page groups by site
    pages = max(1, -(-len(names) // PAGE_NODES))
    page_no = min(page_no, pages)
    shown = names[(page_no - 1) * PAGE_NODES : page_no * PAGE_NODES]
    nodes = []
    for name in shown:
        try:
            node, devs = fleet.node_view(plane, name), fleet.list_devices(plane, name, who=who)
        except (NotFound, KeyError):
            continue  # deleted since the names were read
        nodes.append(
            {
                "node": node,
                "closed": node_closed(node),
                "tiles": [tile(d, node) for d in devs],
                "layouts": card_layouts(devs),
            }
        )
    return {
        "site": site,
        "page_no": page_no,
        "pages": pages,
        "node_count": len(names),
        "nodes": nodes,
    }


def card_panel(plane: ControlPlane, viewer: Viewer, uuid: str) -> dict[str, Any] | None:
    """The card's panel, or None for a card the pool does not have. Its jobs are those the API
    names to the viewer (a tenant: its own, with their shares); other tenants' use is one
    anonymous "in use" row (``others``) whose figures are the card's allocation less the shares
    shown, which the card's totals tell anyway: neither which jobs nor how many."""
    found = data.card(plane, uuid, viewer.principal)
    if found is None:
        return None
    jobs = [
        {
            "id": sh.job,
            "replica": sh.replica,
            "memory_mib": sh.memory_mib,
            "core_pct": sh.core_permille / 10,
        }
        for sh in found.shares
    ]
    others = None
    if found.in_use_by_others:
        others = {
            "memory_mib": max(0, found.allocated_memory_mib - sum(j["memory_mib"] for j in jobs)),
            "core_pct": max(
                0.0, found.allocated_core_permille / 10 - sum(j["core_pct"] for j in jobs)
            ),
        }
    util = [(r.t, r.util_pct) for r in found.recent if r.util_pct is not None]
    return {
        "d": found,
        "jobs": jobs,
        "others": others,
        "spark": sparkline(util),
        "samples": len(util),
    }


def _devices_page(
    request: Request,
    plane: ControlPlane,
    viewer: Viewer,
    site: str,
    page_no: int,
    card: str,
    name: str,
) -> HTMLResponse:
    sites = fleet.list_sites(plane)
    if site and site not in {x.name for x in sites}:
        raise HTTPException(404, f"no site {site!r}")
    panel = card_panel(plane, viewer, card) if card else None
    return page(
        request,
        viewer,
        name,
        sites=sites,
        card=card,
        panel=panel,
        back="/devices" + ("?" + request.url.query if request.url.query else ""),
        **grid_context(plane, viewer.principal, site, page_no),
    )


@router.get("/devices", response_class=HTMLResponse)
def devices_page(
    request: Request,
    plane: PlaneDep,
    viewer: ViewerDep,
    site: SiteQ = "",
    page: PageQ = 1,
    card: CardQ = "",
) -> HTMLResponse:
    return _devices_page(request, plane, viewer, site, page, card, "devices.html")


@router.get("/ui/devices", response_class=HTMLResponse)
def devices_fragment(
    request: Request,
    plane: PlaneDep,
    viewer: ViewerDep,
    site: SiteQ = "",
    page: PageQ = 1,
    card: CardQ = "",
) -> HTMLResponse:
    return _devices_page(request, plane, viewer, site, page, card, "devices_live.html")


def _back(form: dict[str, str]) -> str:
    """Where to go after an action: a path of this site only (never another origin)."""
    back = field(form, "back", 500)
    return back if back.startswith("/") and not back.startswith("//") else "/devices"


def _admin_action(request: Request, viewer: Viewer, form: dict[str, str]) -> None:
    check_csrf(request, viewer.session, form.get("csrf"))
    if not viewer.is_admin:
        raise HTTPException(403, "only the admin cordons and uncordons")


@router.post("/nodes/{name}/{verb}")
def cordon_node_form(
    name: str, verb: str, request: Request, plane: PlaneDep, viewer: ViewerDep, form: FormDep
) -> Response:
    _admin_action(request, viewer, form)
    if verb not in ("cordon", "uncordon") or len(name) > 63:
        raise HTTPException(404, "no such action")
    fleet.cordon_node(plane, name, verb == "cordon")
    return RedirectResponse(_back(form), status_code=303, headers=HEADERS)


@router.post("/cards/{uuid}/{verb}")
def cordon_card_form(
    uuid: str, verb: str, request: Request, plane: PlaneDep, viewer: ViewerDep, form: FormDep
) -> Response:
    _admin_action(request, viewer, form)
    if verb not in ("cordon", "uncordon") or len(uuid) > 200:
        raise HTTPException(404, "no such action")
    fleet.cordon_device(plane, uuid, verb == "cordon")
    return RedirectResponse(_back(form), status_code=303, headers=HEADERS)
