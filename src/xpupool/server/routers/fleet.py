"""/v1/nodes, /v1/devices, /v1/sites, /v1/accelerators, /v1/fleet/overview and /v1/fleet/history."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import JSONResponse

from xpupool.model.errors import RequestError
from xpupool.server import history
from xpupool.server.routers.deps import Admin, Plane, User
from xpupool.server.schemas.base import ErrorBody
from xpupool.server.schemas.card_layouts import CardLayoutIn, CardLayoutView
from xpupool.server.schemas.devices import Accelerator, Device, DeviceDetail
from xpupool.server.schemas.nodes import Node, NodeDeletion, NodeTaintsIn, Site, TaintKeyIn
from xpupool.server.schemas.overview import FleetOverview, History
from xpupool.server.schemas.power import FleetPower
from xpupool.server.services import (
    accelerators,
    card_layouts,
    fleet,
    node_deletion,
    node_taints,
    overview,
    power,
    site_drain,
)
from xpupool.server.wire_values import MAX_REASON, quote, shorten

router = APIRouter(prefix="/v1", tags=["fleet"])
NodeName = Annotated[str, Path(max_length=63)]
Uuid = Annotated[str, Path(max_length=200)]


@router.get("/nodes", response_model=list[Node])
def list_nodes(
    plane: Plane, _: User, site: Annotated[str | None, Query(max_length=63)] = None
) -> list[Node]:
    return fleet.list_nodes(plane, site)


@router.get("/nodes/{name}", response_model=Node)
def get_node(name: NodeName, plane: Plane, _: User) -> Node:
    return fleet.node_view(plane, name)


@router.post("/nodes/{name}/cordon", response_model=Node)
def cordon_node(name: NodeName, plane: Plane, _: Admin) -> Node:
    """No new work lands on the node; what runs there stays."""
    return fleet.cordon_node(plane, name, True)


@router.post("/nodes/{name}/uncordon", response_model=Node)
def uncordon_node(name: NodeName, plane: Plane, _: Admin) -> Node:
    """Back in service; a node waiting to be deleted (a drain) is not deleted after all."""
    return fleet.cordon_node(plane, name, False)


@router.post(
    "/nodes/{name}/taints",
    response_model=Node,
    responses={409: {"description": "A taint with that key and effect is on the node already"}},
)
def taint_node(
    name: NodeName, body: NodeTaintsIn, request: Request, plane: Plane, _: Admin
) -> Node:
    """Put taints on the node and take them off, as ``kubectl taint`` does: all or nothing.
    Work already on the node stays; a removed NoSchedule taint lets pending work in."""
    change = [*(str(t.to_taint()) for t in body.add), *(_removal(r) for r in body.remove)]
    request.state.audit_target = f"node {name}: {' '.join(change) or 'no change'}"
    return node_taints.taint_node(plane, name, body)


def _removal(r: TaintKeyIn) -> str:
    return f"{r.key}{'' if r.effect is None else ':' + r.effect}-"


@router.delete("/nodes/{name}", response_model=NodeDeletion)
def delete_node(
    name: NodeName,
    plane: Plane,
    _: Admin,
    drain: Annotated[
        bool,
        Query(description="With live allocations: cordon now, remove when they end (else 409)."),
    ] = False,
) -> NodeDeletion:
    """Remove the node from the pool and revoke the agent tokens bound to it; 409 naming each
    allocation and job while work is held there, unless ``drain``. A cluster-file node is
    registered again by the next start with that file (the reply's ``note`` says so)."""
    return node_deletion.delete_node(plane, name, drain)


@router.put(
    "/nodes/{name}/cards/{uuid}/layout",
    response_model=CardLayoutView,
    responses={
        409: {
            "description": "Refused: a job holds an instance it destroys, one was not"
            " idle long enough, or the node's pool forbids re-cuts; nothing changed"
        }
    },
)
def recut_card(
    name: NodeName, uuid: Uuid, body: CardLayoutIn, request: Request, plane: Plane, who: Admin
) -> CardLayoutView:
    """Re-cut a partitioned card of an agent node: the node's agent cuts it into ``layout``
    with the vendor tool, and the new instances are scheduled once it reports them."""
    request.state.audit_target = f"node {name} card {uuid}: {','.join(body.layout)}"
    return card_layouts.recut(plane, name, uuid, body, who)


@router.get("/nodes/{name}/cards/{uuid}/layout", response_model=CardLayoutView)
def get_card_layout(name: NodeName, uuid: Uuid, plane: Plane, _: User) -> CardLayoutView:
    """How the card is cut now, the layout wanted (if any) and its re-cut events."""
    return card_layouts.card_layout(plane, name, uuid)


@router.get("/devices", response_model=list[Device])
def list_devices(
    plane: Plane, who: User, node: Annotated[str | None, Query(max_length=63)] = None
) -> list[Device]:
    """Every card; a tenant sees its own jobs named on them, and another tenant's as
    ``in_use_by_others`` only (docs/security.md)."""
    return fleet.list_devices(plane, node, who=who)


@router.get("/devices/{uuid}", response_model=DeviceDetail)
def get_device(uuid: Uuid, plane: Plane, who: User) -> DeviceDetail:
    """One card: what ``/v1/devices`` says of it, the replicas holding shares of it (a
    tenant: of its own jobs only), and its recent readings (for a sparkline)."""
    return fleet.device_detail(plane, uuid, who=who)


@router.post("/devices/{uuid}/cordon", response_model=Device)
def cordon_device(uuid: Uuid, plane: Plane, _: Admin) -> Device:
    return fleet.cordon_device(plane, uuid, True)


@router.post("/devices/{uuid}/uncordon", response_model=Device)
def uncordon_device(uuid: Uuid, plane: Plane, _: Admin) -> Device:
    return fleet.cordon_device(plane, uuid, False)


@router.get("/sites", response_model=list[Site])
def list_sites(plane: Plane, _: User) -> list[Site]:
    return fleet.list_sites(plane)


@router.post("/sites/{name}/drain", response_model=Site)
def drain_site(name: NodeName, plane: Plane, _: Admin) -> Site:
    """No new work there; running jobs left to finish or moved, by their on_site_lost."""
    return site_drain.drain_site(plane, name, True)


@router.post("/sites/{name}/undrain", response_model=Site)
def undrain_site(name: NodeName, plane: Plane, _: Admin) -> Site:
    """Every node of the site takes work again."""
    return site_drain.drain_site(plane, name, False)


@router.get("/accelerators", response_model=list[Accelerator])
def list_accelerators(plane: Plane, _: User) -> list[Accelerator]:
    """The accelerator models a request may name, with how many of each the pool has."""
    return accelerators.accelerators(plane)


@router.get("/fleet/overview", response_model=FleetOverview)
def fleet_overview(plane: Plane, who: User) -> FleetOverview:
    """Per site and model: cards allocated, busy and out of service; stranded capacity; why
    pending jobs wait (a tenant: its own jobs only)."""
    return overview.fleet_overview(plane, who)


@router.get("/fleet/power", response_model=FleetPower)
def fleet_power(plane: Plane, _: User) -> FleetPower:
    """Cards that could sleep (usable, holding nothing) and nodes idle long enough to power
    down (server/power_saving.py): reported only, nothing is changed."""
    return power.fleet_power(plane)


@router.get(
    "/fleet/history",
    response_model=History,
    responses={400: {"description": "A bad window, site or model", "model": ErrorBody}},
)
def fleet_history(
    plane: Plane,
    _: User,
    window: Annotated[str, Query(description="1h, 1d or 1w.")] = "1h",
    site: Annotated[str | None, Query(description="One site; every site when absent.")] = None,
    model: Annotated[
        str | None, Query(description="One device model; every model when absent.")
    ] = None,
) -> History | JSONResponse:
    """The fleet's sampled series over ``window`` (server/history.py): a 400 names the field."""
    try:
        return history.history_series(plane, window, site, model)
    except RequestError as exc:
        body = {
            "field": exc.field,
            "value": quote(exc.value),
            "reason": shorten(exc.reason, MAX_REASON),
        }
        return JSONResponse(body, status_code=400)
