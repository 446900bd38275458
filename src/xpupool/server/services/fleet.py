"""Fleet: nodes and devices as registered, their allocation and live metrics, sites, cordons.

The views read through the plane's ``read`` (one state of the books each); registrations and
cordons are the plane's own operations (``server/plane/registration.py``, ``nodes.py``), which
check and write as one step: a refused one changes nothing.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable

from sqlalchemy import Connection

from xpupool.model.device import Node
from xpupool.model.errors import NotFound
from xpupool.server.auth import Principal
from xpupool.server.plane import ControlPlane, NodeRecord
from xpupool.server.schemas.agent_protocol import NodeIn
from xpupool.server.schemas.devices import Device, DeviceDetail, DeviceSample, DeviceShareHeld
from xpupool.server.schemas.nodes import Node as NodeView
from xpupool.server.schemas.nodes import NodeStatus, Site, SiteDomain, TaintView
from xpupool.server.services.domain_tally import domain_tally

log = logging.getLogger("xpupool.server")


def register(
    plane: ControlPlane,
    body: NodeIn,
    source: str = "agent",
    *,
    within: Callable[[Connection], None] | None = None,
) -> NodeView:
    """Register or update the node an agent describes, all or nothing (the plane's
    :meth:`~xpupool.server.plane.registration.NodeRegistration.register`): a refused
    registration (any 4xx) changes nothing. A device UUID another node has is 422; a new
    inventory that would take what live allocations hold is 409 naming them, unless
    ``body.drain``. ``within`` runs in the registration's transaction before the node is
    written; raising there refuses the registration."""
    node = Node(
        name=body.name,
        cpu_milli=body.cpu_milli,
        memory_mib=body.memory_mib,
        devices=tuple(d.to_device() for d in body.devices),
        site=body.site,
        labels=body.labels,
        container_runtime=body.runtime,
        taints=tuple(t.to_taint() for t in body.taints),
    )
    plane.register(node, source=source, arch=body.arch, os=body.os, drain=body.drain, within=within)
    return node_view(plane, body.name)


def register_many(plane: ControlPlane, nodes: Iterable[Node], source: str) -> None:
    """Cluster-file nodes: simulated hosts registered in one go (a single engine rebuild); nodes
    the store has already are left as they are (one the admin took over stays an agent node).
    One the admin deleted is not in the store: it is registered again, and logged, because the
    file is the operator's declaration (docs/security.md). All or nothing, as :func:`register`."""
    added, known = plane.register_new(nodes, source)
    if known and added and source == "cluster":  # the admin deleted it; the file says so
        log.warning(
            "cluster file: registered %s (not in the store: new in the file, or deleted by the "
            "admin since the last start; the file declares them)",
            ", ".join(sorted(added)),
        )


def _record(plane: ControlPlane, name: str) -> NodeRecord:
    rec = plane.node(name)
    if rec is None:
        raise NotFound("node", name)
    return rec


def node_view(plane: ControlPlane, name: str) -> NodeView:
    """Node ``name`` as the API shows it, read from one state of the books."""
    return plane.read(lambda: _node_view(plane, name))


def _node_view(plane: ControlPlane, name: str) -> NodeView:
    rec = _record(plane, name)
    st = plane.cluster_state
    i = st.node_index[name]
    slots = [st.uuid_slot[d.uuid] for d in rec.node.devices]
    free = int(
        (
            (st.dev_mem_free.reshape(-1)[slots] == st.dev_mem_commit.reshape(-1)[slots])
            & (st.dev_core_free.reshape(-1)[slots] == st.dev_core_commit.reshape(-1)[slots])
        ).sum()
    )
    return NodeView(
        name=name,
        site=rec.node.site,
        status=rec.status,
        schedulable=not rec.cordoned and rec.status is NodeStatus.READY,
        source=rec.source,
        cpu_milli=rec.node.cpu_milli,
        memory_mib=rec.node.memory_mib,
        cpu_allocated_milli=int(rec.node.cpu_milli - st.node_cpu_free[i]),
        memory_allocated_mib=int(rec.node.memory_mib - st.node_mem_free[i]),
        labels=dict(rec.node.labels),
        arch=rec.arch,
        os=rec.os,
        devices=len(rec.node.devices),
        devices_free=free,
        last_heartbeat=rec.last_heartbeat,
        runtime=rec.node.container_runtime,
        taints=[
            TaintView(key=t.key, value=t.value, effect=t.effect.value) for t in rec.node.taints
        ],
        deleting=rec.deleting_since is not None,
        # as the engine holds the node: its site's front set it (engine/link_domains.py)
        link_domain=st.nodes[i].link_domain,
    )


def list_nodes(plane: ControlPlane, site: str | None = None) -> list[NodeView]:
    """The nodes (of ``site``, or all) by name, read from one state of the books."""
    return plane.read(lambda: _list_nodes(plane, site))


def _list_nodes(plane: ControlPlane, site: str | None) -> list[NodeView]:
    names = sorted(n for n, r in plane.node_records.items() if site is None or r.node.site == site)
    return [_node_view(plane, n) for n in names]


def _named_for(who: Principal | None) -> str | None:
    """The tenant whose jobs alone ``who`` sees named on a card; None: every job (the admin, or
    ``who`` None, the server's own view that ``/metrics`` reads). A tenant sees its own jobs'
    ids and shares only, and other tenants' use as anonymous "in use" (docs/security.md)."""
    return None if who is None or who.is_admin else (who.tenant or "")


def list_devices(
    plane: ControlPlane, node: str | None = None, *, who: Principal | None
) -> list[Device]:
    """Every card (of ``node``, or all) as ``who`` may see it (:func:`_list_devices`), read from
    one state of the books."""
    return plane.read(lambda: _list_devices(plane, node, who))


def _list_devices(plane: ControlPlane, node: str | None, who: Principal | None) -> list[Device]:
    """Every card (of ``node``, or all), as ``who`` may see it: ``jobs`` lists only the jobs
    whose names ``who`` may see (:func:`_named_for`), ``in_use_by_others`` says that some other
    job holds a share too. The allocation figures are the card's whole, everyone's: the fleet's
    aggregate, which every tenant sees."""
    mine = _named_for(who)
    st = plane.cluster_state
    mem_commit, core_commit = st.dev_mem_commit.reshape(-1), st.dev_core_commit.reshape(-1)
    holders: dict[str, set[int]] = {}
    others: set[str] = set()
    for job in plane.held_jobs.values():
        visible = mine is None or job.tenant == mine
        for alloc in job.allocations:
            for share in alloc.devices:
                if visible:
                    holders.setdefault(share.uuid, set()).add(job.id)
                else:
                    others.add(share.uuid)
    out = []
    names = [node] if node is not None else sorted(plane.node_records)
    for name in names:
        rec = _record(plane, name)
        for d in rec.node.devices:
            slot = st.uuid_slot[d.uuid]
            health, cause = plane.card_health.state(d.uuid)
            out.append(
                Device(
                    uuid=d.uuid,
                    node=name,
                    site=rec.node.site,
                    index=d.index,
                    vendor=d.vendor,
                    model=d.model,
                    canonical_model=_canonical(plane, d.vendor, d.model),
                    memory_mib=d.memory_mib,
                    driver_version=d.driver_version,
                    runtimes=dict(d.runtimes),
                    link_group=d.link_group,
                    healthy=bool(st.dev_healthy.reshape(-1)[slot]) and health != "unhealthy",
                    health=health,
                    health_cause=cause,
                    cordoned=d.uuid in rec.cordoned_devices or d.uuid in rec.draining,
                    draining=d.uuid in rec.draining,
                    allocated_memory_mib=int(mem_commit[slot] - st.dev_mem_free.reshape(-1)[slot]),
                    allocated_core_permille=int(
                        core_commit[slot] - st.dev_core_free.reshape(-1)[slot]
                    ),
                    committable_memory_mib=int(mem_commit[slot]),
                    committable_core_permille=int(core_commit[slot]),
                    jobs=sorted(holders.get(d.uuid, ())),
                    in_use_by_others=d.uuid in others,
                    metrics=plane.device_metrics(d.uuid),
                    partition=d.partition,
                    partition_of=d.partition_of,
                    partition_start=d.partition_start,
                )
            )
    return out


def device_detail(plane: ControlPlane, uuid: str, *, who: Principal | None) -> DeviceDetail:
    """One card as ``who`` may see it (:func:`_device_detail`), read from one state."""
    return plane.read(lambda: _device_detail(plane, uuid, who))


def _device_detail(plane: ControlPlane, uuid: str, who: Principal | None) -> DeviceDetail:
    """One card as :func:`list_devices` shows it to ``who``, with the shares held of it by the
    jobs ``who`` may see named (another tenant's share is only ``in_use_by_others``) and its
    recent readings (``plane.live``); NotFound for a UUID no node in the pool has."""
    mine = _named_for(who)
    st = plane.cluster_state
    slot = st.uuid_slot.get(uuid)
    name = None if slot is None else st.node_names[st.node_of_slot(slot)]
    if name is None or plane.node(name) is None:
        raise NotFound("device", uuid)
    device = next(d for d in _list_devices(plane, name, who) if d.uuid == uuid)
    shares = [
        DeviceShareHeld(
            job=job.id,
            replica=alloc.replica,
            memory_mib=share.memory_mib,
            core_permille=share.core_permille,
        )
        for job in plane.held_jobs.values()
        if mine is None or job.tenant == mine
        for alloc in job.allocations
        if alloc.node == name
        for share in alloc.devices
        if share.uuid == uuid
    ]
    recent = [
        DeviceSample(
            t=r.t,
            util_pct=r.util_pct,
            memory_mib_used=r.memory_mib_used,
            power_w=r.power_w,
            temp_c=r.temp_c,
        )
        for r in plane.live.recent(uuid)
    ]
    return DeviceDetail(
        **device.model_dump(),
        shares=sorted(shares, key=lambda x: (x.job, x.replica)),
        recent=recent,
    )


def _canonical(plane: ControlPlane, vendor: str, model: str) -> str | None:
    found = plane.cluster_state.catalog.lookup(model, vendor)
    return None if found is None else found.name


def list_sites(plane: ControlPlane) -> list[Site]:
    """Each site's nodes and cards, read from one state of the books."""
    return plane.read(lambda: _list_sites(plane))


def _list_sites(plane: ControlPlane) -> list[Site]:
    by_site: dict[str, list[NodeView]] = {}
    for n in _list_nodes(plane, None):
        by_site.setdefault(n.site, []).append(n)
    models: dict[str, Counter[str]] = {}
    open_nodes: Counter[str] = Counter()  # per site, its nodes not cordoned
    kubernetes: set[str] = set()  # sites whose nodes a Kubernetes cluster gives
    for rec in plane.node_records.values():
        open_nodes[rec.node.site] += not rec.cordoned
        if rec.source.startswith("kubernetes:"):
            kubernetes.add(rec.node.site)
        c = models.setdefault(rec.node.site, Counter())
        for d in rec.node.devices:
            c[_canonical(plane, d.vendor, d.model) or d.model] += 1
    dispatched = Counter(j.site for j in plane.queued.values() if j.site is not None)
    domains: dict[str, list[SiteDomain]] = {}  # one tally for every view (domain_tally.py)
    for dom in domain_tally(plane):
        domains.setdefault(dom.site, []).append(
            SiteDomain(
                name=dom.name, nodes=dom.nodes, devices=dom.devices, devices_free=dom.devices_free
            )
        )
    return [
        Site(
            name=site,
            nodes=len(ns),
            nodes_ready=sum(1 for n in ns if n.status is NodeStatus.READY),
            devices=sum(n.devices for n in ns),
            devices_free=sum(n.devices_free for n in ns if n.schedulable),
            by_model=dict(sorted(models.get(site, Counter()).items())),
            reachable=site not in plane.site_dispatch.unreachable,
            drained=not open_nodes[site],
            kind="kubernetes" if site in kubernetes else "agents",
            last_contact=max(
                (n.last_heartbeat for n in ns if n.last_heartbeat is not None), default=None
            ),
            devices_allocated=sum(n.devices - n.devices_free for n in ns),
            pending=dispatched[site],
            domains=domains.get(site, []),
        )
        for site, ns in sorted(by_site.items())
    ]


def cordon_node(plane: ControlPlane, name: str, cordoned: bool) -> NodeView:
    plane.set_cordon(name, cordoned)
    return node_view(plane, name)


def cordon_device(plane: ControlPlane, uuid: str, cordoned: bool) -> Device:
    name = plane.set_card_cordon(uuid, cordoned)
    # only the admin cordons: the answer names every job, as the admin sees it
    return next(d for d in list_devices(plane, name, who=None) if d.uuid == uuid)
