"""Fleet: nodes and devices as registered, their allocation and live metrics, sites, cordons.

Registration is idempotent: the same node registering the same devices changes nothing; changed
devices rebuild the engine (rare) and keep every allocation whose devices are still there.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from sqlalchemy import insert, update

from xpupool.model.device import Node
from xpupool.model.errors import NotFound
from xpupool.server import schemas as s
from xpupool.server.plane import ControlPlane, NodeRecord, device_from_dict, device_to_dict
from xpupool.server.storage.fleet import nodes as t_nodes


def register(plane: ControlPlane, body: s.NodeIn, source: str = "agent") -> s.Node:
    node = Node(
        name=body.name,
        cpu_milli=body.cpu_milli,
        memory_mib=body.memory_mib,
        devices=tuple(device_from_dict(d.model_dump()) for d in body.devices),
        site=body.site,
        labels=body.labels,
    )
    now = plane.clock()
    with plane.write() as conn:
        rec = plane.nodes.get(body.name)
        values = {
            "site": node.site,
            "source": source,
            "status": s.NodeStatus.READY.value,
            "cpu_milli": node.cpu_milli,
            "memory_mib": node.memory_mib,
            "labels": dict(node.labels),
            "arch": body.arch,
            "os": body.os,
            "devices": [device_to_dict(d) for d in node.devices],
            "last_heartbeat": now,
        }
        if rec is None:
            conn.execute(
                insert(t_nodes).values(
                    name=node.name,
                    schedulable=True,
                    cordoned_devices=[],
                    registered_at=now,
                    **values,
                )
            )
            plane.nodes[node.name] = NodeRecord(
                node, source, s.NodeStatus.READY, False, set(), body.arch, body.os, now, now
            )
            plane.rebuild_engine()
        else:
            conn.execute(update(t_nodes).where(t_nodes.c.name == node.name).values(**values))
            changed = rec.node != node
            was_lost = rec.status is s.NodeStatus.LOST
            rec.node, rec.source, rec.arch, rec.os = node, source, body.arch, body.os
            rec.status, rec.last_heartbeat = s.NodeStatus.READY, now
            if changed:
                plane.rebuild_engine()
            elif was_lost and not rec.cordoned:
                plane.engine.state.set_node_schedulable(node.name, True)
                plane.bump()
    return node_view(plane, body.name)


def register_many(plane: ControlPlane, nodes: Iterable[Node], source: str) -> None:
    """Cluster-file nodes: simulated hosts registered in one go (a single engine rebuild)."""
    now = plane.clock()
    with plane.write() as conn:
        for node in nodes:
            if node.name in plane.nodes:
                continue
            conn.execute(
                insert(t_nodes).values(
                    name=node.name,
                    site=node.site,
                    source=source,
                    status=s.NodeStatus.READY.value,
                    schedulable=node.schedulable,
                    cpu_milli=node.cpu_milli,
                    memory_mib=node.memory_mib,
                    labels=dict(node.labels),
                    arch="",
                    os="",
                    devices=[device_to_dict(d) for d in node.devices],
                    cordoned_devices=[],
                    last_heartbeat=None,
                    registered_at=now,
                )
            )
            plane.nodes[node.name] = NodeRecord(
                node, source, s.NodeStatus.READY, not node.schedulable, set(), "", "", now
            )
        plane.rebuild_engine()


def _record(plane: ControlPlane, name: str) -> NodeRecord:
    rec = plane.nodes.get(name)
    if rec is None:
        raise NotFound("node", name)
    return rec


def node_view(plane: ControlPlane, name: str) -> s.Node:
    with plane.lock:
        rec = _record(plane, name)
        st = plane.engine.state
        i = st.node_index[name]
        free = sum(
            1
            for d in rec.node.devices
            if st.dev_mem_free.reshape(-1)[st.uuid_slot[d.uuid]] == d.memory_mib
            and st.dev_core_free.reshape(-1)[st.uuid_slot[d.uuid]] == 1000
        )
        return s.Node(
            name=name,
            site=rec.node.site,
            status=rec.status,
            schedulable=not rec.cordoned and rec.status is s.NodeStatus.READY,
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
        )


def list_nodes(plane: ControlPlane, site: str | None = None) -> list[s.Node]:
    with plane.lock:
        names = sorted(n for n, r in plane.nodes.items() if site is None or r.node.site == site)
        return [node_view(plane, n) for n in names]


def list_devices(plane: ControlPlane, node: str | None = None) -> list[s.Device]:
    with plane.lock:
        st = plane.engine.state
        holders: dict[str, list[int]] = {}
        for job in plane.held.values():
            for alloc in job.allocations:
                for share in alloc.devices:
                    holders.setdefault(share.uuid, []).append(job.id)
        out = []
        names = [node] if node is not None else sorted(plane.nodes)
        for name in names:
            rec = _record(plane, name)
            for d in rec.node.devices:
                slot = st.uuid_slot[d.uuid]
                out.append(
                    s.Device(
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
                        healthy=bool(st.dev_healthy.reshape(-1)[slot]),
                        cordoned=d.uuid in rec.cordoned_devices,
                        allocated_memory_mib=int(d.memory_mib - st.dev_mem_free.reshape(-1)[slot]),
                        allocated_core_permille=int(1000 - st.dev_core_free.reshape(-1)[slot]),
                        jobs=sorted(set(holders.get(d.uuid, []))),
                        metrics=plane.metrics.get(d.uuid),
                    )
                )
        return out


def _canonical(plane: ControlPlane, vendor: str, model: str) -> str | None:
    found = plane.engine.state.catalog.lookup(model, vendor)
    return None if found is None else found.name


def list_sites(plane: ControlPlane) -> list[s.Site]:
    with plane.lock:
        by_site: dict[str, list[s.Node]] = {}
        for n in list_nodes(plane):
            by_site.setdefault(n.site, []).append(n)
        models: dict[str, Counter[str]] = {}
        for rec in plane.nodes.values():
            c = models.setdefault(rec.node.site, Counter())
            for d in rec.node.devices:
                c[_canonical(plane, d.vendor, d.model) or d.model] += 1
        return [
            s.Site(
                name=site,
                nodes=len(ns),
                nodes_ready=sum(1 for n in ns if n.status is s.NodeStatus.READY),
                devices=sum(n.devices for n in ns),
                devices_free=sum(n.devices_free for n in ns if n.schedulable),
                by_model=dict(sorted(models.get(site, Counter()).items())),
            )
            for site, ns in sorted(by_site.items())
        ]


def cordon_node(plane: ControlPlane, name: str, cordoned: bool) -> s.Node:
    with plane.write() as conn:
        rec = _record(plane, name)
        rec.cordoned = cordoned
        conn.execute(update(t_nodes).where(t_nodes.c.name == name).values(schedulable=not cordoned))
        plane.engine.state.set_node_schedulable(
            name, not cordoned and rec.status is s.NodeStatus.READY
        )
        if not cordoned:
            plane.bump()
    return node_view(plane, name)


def cordon_device(plane: ControlPlane, uuid: str, cordoned: bool) -> s.Device:
    with plane.write() as conn:
        rec = next(
            (r for r in plane.nodes.values() if any(d.uuid == uuid for d in r.node.devices)), None
        )
        if rec is None:
            raise NotFound("device", uuid)
        (rec.cordoned_devices.add if cordoned else rec.cordoned_devices.discard)(uuid)
        conn.execute(
            update(t_nodes)
            .where(t_nodes.c.name == rec.node.name)
            .values(cordoned_devices=sorted(rec.cordoned_devices))
        )
        plane.engine.state.set_device_cordoned(uuid, cordoned)
        if not cordoned:
            plane.bump()
        name = rec.node.name
    return next(d for d in list_devices(plane, name) if d.uuid == uuid)
