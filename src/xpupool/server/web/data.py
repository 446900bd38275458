"""Where the dashboard's fleet figures come from: the one seam between pages and data services.

The overview page reads ``services/overview.py`` (``fleet_overview``, the answer of
``GET /v1/fleet/overview``), its history charts ``server/history.py`` (``history_series``,
``GET /v1/fleet/history``) and a card's panel ``services/fleet.py`` (``device_detail``,
``GET /v1/devices/{uuid}``): the pages show exactly what the API answers. Overview and history
come back as the API's JSON (plain dicts), which the templates and the per-site sums read.
"""

from __future__ import annotations

from typing import Any

from xpupool.model.errors import NotFound
from xpupool.server.auth import Principal
from xpupool.server.history import history_series
from xpupool.server.plane import ControlPlane
from xpupool.server.schemas.devices import DeviceDetail
from xpupool.server.schemas.nodes import Site
from xpupool.server.services.fleet import device_detail, list_sites
from xpupool.server.services.overview import fleet_overview


def overview(plane: ControlPlane, principal: Principal) -> dict[str, Any]:
    """Fleet totals per (site, vendor, model), stranded capacity, pending jobs by reason and job
    counts; for a tenant, the jobs figures count its own jobs only."""
    return fleet_overview(plane, principal).model_dump(mode="json")


def history(
    plane: ControlPlane, window: str, site: str | None, model: str | None
) -> dict[str, Any]:
    """``{window, step_s, series: [{name, site, model, points: [[t, v], ...]}]}``;
    RequestError naming ``window``, ``site`` or ``model`` when the history does not know it."""
    return history_series(plane, window, site, model).model_dump(mode="json")


def card(plane: ControlPlane, uuid: str, principal: Principal) -> DeviceDetail | None:
    """One card with the shares ``principal`` may see held of it (a tenant: its own jobs') and
    its recent readings; None for an unknown UUID."""
    try:
        return device_detail(plane, uuid, who=principal)
    except NotFound:
        return None


def sites(plane: ControlPlane) -> list[Site]:
    """Each site's kind, health and dispatched work, as ``GET /v1/sites`` gives them (the
    dashboard shows every site a caller may see the fleet of: the fleet is not per tenant)."""
    return list_sites(plane)
