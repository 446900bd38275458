"""Fleet: nodes and devices as registered, their allocation and live metrics, sites, cordons.

Registration is idempotent and atomic: the same node registering the same devices changes nothing;
changed devices rebuild the engine (rare) off to the side, and only a registration that keeps every
live allocation whole is stored and served (or, asked to drain, one that keeps what they hold until
they end). A refused one changes nothing.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import replace

from sqlalchemy import Connection

from xpupool.model.device import Node
from xpupool.model.errors import Conflict, NotFound, RequestError
from xpupool.server.auth import Principal
from xpupool.server.drain import plan
from xpupool.server.plane import ControlPlane, NodeRecord, node_values, taints_to_row
from xpupool.server.plane import node_lifecycle as nl
from xpupool.server.schemas.agent_protocol import NodeIn
from xpupool.server.schemas.devices import Device, DeviceDetail, DeviceSample, DeviceShareHeld
from xpupool.server.schemas.nodes import Node as NodeView
from xpupool.server.schemas.nodes import NodeStatus, Site, TaintView

log = logging.getLogger("xpupool.server")


def register(
    plane: ControlPlane,
    body: NodeIn,
    source: str = "agent",
    *,
    within: Callable[[Connection], None] | None = None,
) -> NodeView:
    """Register or update a node, all or nothing: a refused registration (any 4xx) changes
    nothing, in memory or in the store. A device UUID another node has is 422. A new inventory
    that would take a device (or CPU, memory) from under live allocations is 409 naming them,
    unless ``body.drain``: then what is in the way is served as it was, cordoned, and changed
    when its last allocation ends (``server/drain.py``). ``within`` runs in the registration's
    transaction before the node is written; raising there refuses the registration. The body's
    taints are taken when the node is new (kubelet's ``--register-with-taints``); a node the
    store has keeps its own, which only the admin changes (``services/node_taints.py``), so an
    agent cannot take off a taint the admin put on."""
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
    with plane.locked():
        _check_uuids_free(plane, body)
        rec = plane.node(body.name)
        if rec is not None and rec.node.taints != node.taints:
            if node.taints:
                log.info(
                    "node %s registers with taints %s; it keeps %s (taken at its first "
                    "registration, then changed by the admin: xpupool node taint)",
                    node.name,
                    ", ".join(map(str, node.taints)),
                    ", ".join(map(str, rec.node.taints)) or "none",
                )
            node = replace(node, taints=rec.node.taints)
        held = [
            (j.id, a)
            for j in plane.held_jobs.values()
            for a in j.allocations
            if a.node == node.name
        ]
        step = plan(rec.node if rec is not None else None, node, held)
        if step.blocked and not body.drain:
            raise Conflict(
                f"node {node.name}: the new inventory would take what live work holds: "
                f"{'; '.join(step.blocked)}. Nothing changed; register with drain: true to cordon "
                "it now and apply the change when that work ends"
            )
        now = plane.clock()
        out = nl.transition(
            rec.life if rec is not None else None, nl.Register(draining=step.target is not None)
        )
        assert out.life is not None  # a registration never removes a node
        fresh = NodeRecord(
            step.serve,
            source,
            NodeStatus.LOST if out.life.lost else NodeStatus.READY,
            out.life.cordoned,
            set(rec.cordoned_devices) if rec is not None else set(),
            body.arch,
            body.os,
            rec.registered_at if rec is not None else now,
            now,
            plane.monotonic(),
            target=step.target,
            deleting_since=out.life.deleting_since,  # the admin's stands
        )
        changed = rec is None or rec.node != fresh.node or rec.target != fresh.target
        built = plane.build({**plane.node_records, node.name: fresh}) if changed else None
        if built is not None and built.problems:
            raise Conflict(
                f"node {node.name}: {'; '.join(p.reason for p in built.problems)}. Nothing changed"
            )
        values = {
            "site": node.site,
            "source": source,
            "labels": dict(node.labels),
            "arch": body.arch,
            "os": body.os,
            "runtime": node.container_runtime,
            "taints": taints_to_row(node.taints),
            "last_heartbeat": now,
            **node_values(fresh),
        }
        with plane.write() as conn:
            if within is not None:  # e.g. a bootstrap exchange: commits with the node or not at all
                within(conn)
            plane.register_node(conn, fresh, values)
        # stored: now memory, still under the lock
        plane.serve_nodes({node.name: fresh})
        if built is not None:
            plane.install(built)
        elif out.bump:  # a lost node registers again: ready, and not cordoned
            plane.set_schedulable(node.name, True)
            plane.bump()
        if step.blocked:
            log.warning("node %s draining: %s", node.name, "; ".join(step.blocked))
    return node_view(plane, body.name)


def _check_uuids_free(plane: ControlPlane, body: NodeIn) -> None:
    """A device UUID names one device in the pool: another node's is refused (422)."""
    owner = {
        d.uuid: name
        for name, rec in plane.node_records.items()
        if name != body.name
        for n in (rec.node, rec.target)
        if n is not None
        for d in n.devices
    }
    for i, d in enumerate(body.devices):
        if d.uuid in owner:
            raise RequestError(
                f"devices[{i}].uuid", d.uuid, f"already registered by node {owner[d.uuid]}"
            )


def register_many(plane: ControlPlane, nodes: Iterable[Node], source: str) -> None:
    """Cluster-file nodes: simulated hosts registered in one go (a single engine rebuild); nodes
    the store has already are left as they are (one the admin took over stays an agent node).
    One the admin deleted is not in the store: it is registered again, and logged, because the
    file is the operator's declaration (docs/security.md). All or nothing, as :func:`register`."""
    now = plane.clock()
    with plane.locked():
        known = bool(plane.node_records)
        added: dict[str, NodeRecord] = {}
        for node in nodes:
            if node.name in plane.node_records:
                continue
            life = nl.transition(None, nl.Register(cordoned=not node.schedulable)).life
            assert life is not None
            added[node.name] = NodeRecord(
                node, source, NodeStatus.READY, life.cordoned, set(), "", "", now
            )
        built = plane.build({**plane.node_records, **added})
        with plane.write() as conn:
            plane.register_nodes(
                conn,
                [
                    {
                        "name": rec.node.name,
                        "site": rec.node.site,
                        "source": source,
                        **nl.row_values(rec.life),
                        "labels": dict(rec.node.labels),
                        "arch": "",
                        "os": "",
                        "runtime": rec.node.container_runtime,
                        "taints": taints_to_row(rec.node.taints),
                        "cordoned_devices": [],
                        "last_heartbeat": None,
                        "registered_at": now,
                        **node_values(rec),
                    }
                    for rec in added.values()
                ],
            )
        plane.serve_nodes(added)
        plane.install(built)
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
    with plane.locked():
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
        )


def list_nodes(plane: ControlPlane, site: str | None = None) -> list[NodeView]:
    with plane.locked():
        names = sorted(
            n for n, r in plane.node_records.items() if site is None or r.node.site == site
        )
        return [node_view(plane, n) for n in names]


def _named_for(who: Principal | None) -> str | None:
    """The tenant whose jobs alone ``who`` sees named on a card; None: every job (the admin, or
    ``who`` None, the server's own view that ``/metrics`` reads). A tenant sees its own jobs'
    ids and shares only, and other tenants' use as anonymous "in use" (docs/security.md)."""
    return None if who is None or who.is_admin else (who.tenant or "")


def list_devices(
    plane: ControlPlane, node: str | None = None, *, who: Principal | None
) -> list[Device]:
    """Every card (of ``node``, or all), as ``who`` may see it: ``jobs`` lists only the jobs
    whose names ``who`` may see (:func:`_named_for`), ``in_use_by_others`` says that some other
    job holds a share too. The allocation figures are the card's whole, everyone's: the fleet's
    aggregate, which every tenant sees."""
    mine = _named_for(who)
    with plane.locked():
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
                        allocated_memory_mib=int(
                            mem_commit[slot] - st.dev_mem_free.reshape(-1)[slot]
                        ),
                        allocated_core_permille=int(
                            core_commit[slot] - st.dev_core_free.reshape(-1)[slot]
                        ),
                        committable_memory_mib=int(mem_commit[slot]),
                        committable_core_permille=int(core_commit[slot]),
                        jobs=sorted(holders.get(d.uuid, ())),
                        in_use_by_others=d.uuid in others,
                        metrics=plane.device_metrics(d.uuid),
                    )
                )
        return out


def device_detail(plane: ControlPlane, uuid: str, *, who: Principal | None) -> DeviceDetail:
    """One card as :func:`list_devices` shows it to ``who``, with the shares held of it by the
    jobs ``who`` may see named (another tenant's share is only ``in_use_by_others``) and its
    recent readings (``plane.live``); NotFound for a UUID no node in the pool has."""
    mine = _named_for(who)
    with plane.locked():
        st = plane.cluster_state
        slot = st.uuid_slot.get(uuid)
        name = None if slot is None else st.node_names[st.node_of_slot(slot)]
        if name is None or plane.node(name) is None:
            raise NotFound("device", uuid)
        device = next(d for d in list_devices(plane, name, who=who) if d.uuid == uuid)
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
    with plane.locked():
        by_site: dict[str, list[NodeView]] = {}
        for n in list_nodes(plane):
            by_site.setdefault(n.site, []).append(n)
        models: dict[str, Counter[str]] = {}
        for rec in plane.node_records.values():
            c = models.setdefault(rec.node.site, Counter())
            for d in rec.node.devices:
                c[_canonical(plane, d.vendor, d.model) or d.model] += 1
        return [
            Site(
                name=site,
                nodes=len(ns),
                nodes_ready=sum(1 for n in ns if n.status is NodeStatus.READY),
                devices=sum(n.devices for n in ns),
                devices_free=sum(n.devices_free for n in ns if n.schedulable),
                by_model=dict(sorted(models.get(site, Counter()).items())),
            )
            for site, ns in sorted(by_site.items())
        ]


def cordon_node(plane: ControlPlane, name: str, cordoned: bool) -> NodeView:
    with plane.write() as conn:
        _record(plane, name)
        plane.cordon_node(conn, name, cordoned)
    return node_view(plane, name)


def cordon_device(plane: ControlPlane, uuid: str, cordoned: bool) -> Device:
    with plane.write() as conn:
        rec = next(
            (r for r in plane.node_records.values() if any(d.uuid == uuid for d in r.node.devices)),
            None,
        )
        if rec is None:
            raise NotFound("device", uuid)
        plane.cordon_device(conn, rec, uuid, cordoned)
        if not cordoned:  # back by the admin's word, whatever its health said (card_health.py)
            plane.card_health.forget(uuid)
        name = rec.node.name
    # only the admin cordons: the answer names every job, as the admin sees it
    return next(d for d in list_devices(plane, name, who=None) if d.uuid == uuid)
