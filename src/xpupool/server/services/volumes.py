"""Volumes (``/v1/volumes``): the admin declares them, tenants mount them in jobs.

Who may mount what is decided here, once, at submission (the volume's tenants and queues) and
again when the replica is handed out (a volume deleted or narrowed since is not given). The path
a job gets is decided here too, never by the job: the volume's directory on the node (``{node}``
replaced), and for a per-tenant volume the tenant's own directory under it, which the agent
creates for the tenant's uid without following a link (agent/launch/volume_mounts.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from xpupool.model.errors import Forbidden, NotFound, RequestError
from xpupool.server.auth import Principal
from xpupool.server.plane import volume_rows
from xpupool.server.schemas.agent_protocol import VolumeGrant
from xpupool.server.schemas.volumes import Volume, VolumeIn, VolumeMount, VolumeUsage

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from xpupool.server.plane.control import ControlPlane


def put_volume(plane: ControlPlane, name: str, body: VolumeIn) -> tuple[Volume, bool]:
    created = volume_rows.put(plane, name, body.model_dump(), plane.clock())
    with plane.db.connect() as conn:
        return _view(plane, volume_rows.listed(conn, [name])[0], None), created


def list_volumes(plane: ControlPlane, who: Principal) -> list[Volume]:
    """Every volume for the admin; for a tenant, those it may mount, with its own usage only."""
    with plane.db.connect() as conn:
        rows = volume_rows.listed(conn)
    if not who.is_admin:
        if who.tenant is None:
            raise Forbidden("only a tenant or the admin sees volumes")
        rows = [r for r in rows if _tenant_may(r, who.tenant)]
    return [_view(plane, r, None if who.is_admin else who.tenant) for r in rows]


def _view(plane: ControlPlane, row: dict[str, Any], tenant: str | None) -> Volume:
    """``row`` with what the agents last measured of it (``tenant``: only that tenant's own
    directories of a per-tenant volume), and who holds more than its quota."""
    usage = [
        VolumeUsage(node=node, tenant=r.tenant, bytes=r.bytes, complete=r.complete, at=at)
        for node, (at, reports) in sorted(plane.volume_usage.items())
        for r in reports
        if r.name == row["name"] and (tenant is None or not row["per_tenant"] or r.tenant == tenant)
    ]
    # one directory per node ('{node}' in the path) adds up; one path on every node is taken
    # for shared storage, which each node measures whole: its largest measure counts
    per_node = "{node}" in row["path"]
    held: dict[str | None, int] = {}
    for u in usage:
        held[u.tenant] = (
            held.get(u.tenant, 0) + u.bytes if per_node else max(held.get(u.tenant, 0), u.bytes)
        )
    used = sum(held.values()) if usage else None
    quota = row.get("quota_bytes")
    over: list[str] = []
    if quota is not None:
        over = sorted(t or "all" for t, n in held.items() if n > quota)
    return Volume(**row, usage=usage, used_bytes=used, over_quota=over)


def delete_volume(plane: ControlPlane, name: str) -> None:
    """Jobs running with it keep their mount; their later runs are not given it."""
    if not volume_rows.remove(plane, name):
        raise NotFound("volume", name)


def _tenant_may(row: dict[str, Any], tenant: str) -> bool:
    return row["tenants"] is None or tenant in row["tenants"]


def may_mount(row: dict[str, Any], tenant: str, queue: str) -> bool:
    """Whether a job of ``tenant`` in ``queue`` may mount the volume of ``row``."""
    return _tenant_may(row, tenant) and (row["queues"] is None or queue in row["queues"])


def check_mounts(conn: Connection, tenant: str, queue: str, mounts: Sequence[VolumeMount]) -> None:
    """Refuse a job's mounts (422 naming ``volumes[i]``) of a volume that does not exist, that
    its tenant or queue may not mount, or read-write of a read-only volume. A volume the tenant
    may not mount is reported as absent, as another tenant's secret is."""
    if not mounts:
        return
    found = {r["name"]: r for r in volume_rows.listed(conn, [m.name for m in mounts])}
    for i, m in enumerate(mounts):
        row = found.get(m.name)
        if row is None or not _tenant_may(row, tenant):
            raise RequestError(f"volumes[{i}].name", m.name, "no volume of that name")
        if row["queues"] is not None and queue not in row["queues"]:
            why = f"queue {queue!r} may not mount it (its queues: {', '.join(row['queues'])})"
            raise RequestError(f"volumes[{i}].name", m.name, why)
        if row["read_only"] and not m.read_only:
            why = "the volume is read-only: mount it with read_only (':ro')"
            raise RequestError(f"volumes[{i}].read_only", m.read_only, why)


def grants(
    conn: Connection, tenant: str, queue: str, node: str, mounts: list[dict[str, Any]] | None
) -> list[VolumeGrant]:
    """A replica's mounts as its node's agent makes them; one of a volume deleted, or narrowed
    so that the job may no longer mount it, is left out."""
    if not mounts:
        return []
    found = {r["name"]: r for r in volume_rows.listed(conn, [m["name"] for m in mounts])}
    out = []
    for m in mounts:
        row = found.get(m["name"])
        if row is None or not _tenant_may(row, tenant):
            continue
        if row["queues"] is not None and queue not in row["queues"]:
            continue
        out.append(
            VolumeGrant(
                name=m["name"],
                host_path=row["path"].replace("{node}", node),
                per_tenant=row["per_tenant"],
                mount_path=m["path"],
                read_only=bool(m["read_only"] or row["read_only"]),
            )
        )
    return out
