"""The plane's store: rows to records and back, and the SQL the plane runs on its tables.

``server/storage/`` declares the tables; this module is the plane's own reading and writing of
them, so that no other module of the plane (nor any service) writes a node row or a job's phase.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from sqlalchemy import Connection, delete, func, insert, select, update

from xpupool.engine.cycle.admission import QueueSpec
from xpupool.engine.gang_sites import within_sites
from xpupool.model.allocation import Allocation, DeviceShare
from xpupool.model.device import Device, Node
from xpupool.model.errors import RequestError
from xpupool.model.qos import may_be_preempted
from xpupool.model.request import Request
from xpupool.model.request_model import request_from_dict
from xpupool.model.stopping import MAX_MIN_RUN_S, IdleStop, parse_duration, parse_idle_stop
from xpupool.model.taint import Taint
from xpupool.server import job_lifecycle as lc
from xpupool.server.auth import AGENT_ROLES
from xpupool.server.consistency import Problem
from xpupool.server.plane import site_pod_rows
from xpupool.server.plane.records import STOPPING, HeldJob, NodeRecord, PendingJob
from xpupool.server.queue_spec import queue_spec
from xpupool.server.schemas.agent_protocol import DeviceIn
from xpupool.server.schemas.jobs import HOLDING_STATES, JobPhase, RetryCause, StopCause
from xpupool.server.schemas.nodes import NodeStatus
from xpupool.server.storage.card_layouts import card_layouts
from xpupool.server.storage.driver_insert import insert_rows, update_rows
from xpupool.server.storage.fleet import nodes as t_nodes
from xpupool.server.storage.job_writes import job_update, job_update_params
from xpupool.server.storage.jobs import allocations as t_allocs
from xpupool.server.storage.jobs import job_events as t_events
from xpupool.server.storage.jobs import jobs as t_jobs
from xpupool.server.storage.pool import first_allocation_id
from xpupool.server.storage.pool import pool as t_pool
from xpupool.server.storage.tenants import queues as t_queues
from xpupool.server.storage.tenants import tenants as t_tenants
from xpupool.server.storage.tenants import tokens as t_tokens

_SITE_FIELDS = ("type_name", "share_mode")
"""What a Kubernetes site's card carries beyond an agent's wire form (``DeviceIn``): stored beside
it, only when set, so an agent's card's row is its wire form exactly."""


def device_from_dict(d: dict[str, object]) -> Device:
    device = DeviceIn.model_validate({k: v for k, v in d.items() if k not in _SITE_FIELDS})
    type_name, share_mode = d.get("type_name"), d.get("share_mode")
    return replace(
        device.to_device(),
        type_name=None if type_name is None else str(type_name),
        share_mode=None if share_mode is None else str(share_mode),
    )


def node_from_row(row: object) -> Node:
    r = dict(row)  # type: ignore[call-overload]
    return Node(
        name=r["name"],
        cpu_milli=int(r["cpu_milli"]),
        memory_mib=int(r["memory_mib"]),
        devices=tuple(device_from_dict(d) for d in r["devices"]),
        site=r["site"],
        labels=r["labels"],
        container_runtime=r.get("runtime"),
        taints=taints_from_row(r.get("taints")),
    )


def taints_from_row(data: object) -> tuple[Taint, ...]:
    """The stored taints (null in a row from before taints: none); read as any valid taint, as
    a stored row is (a row that holds none raises ValueError or KeyError: the node is noted)."""
    if data is None:
        return ()
    if not isinstance(data, list):
        raise ValueError(f"taints: expected a list, got {type(data).__name__}")
    return tuple(Taint(str(t["key"]), str(t.get("value") or ""), t["effect"]) for t in data)


def taints_to_row(taints: Iterable[Taint]) -> list[dict[str, object]]:
    """The stored form of ``taints``: Kubernetes' objects, in the node's order."""
    return [{"key": t.key, "value": t.value, "effect": t.effect.value} for t in taints]


def node_values(rec: NodeRecord) -> dict[str, object]:
    """The inventory columns of a node row: what is served, and what waits for a drain."""
    target = rec.target
    return {
        "cpu_milli": rec.node.cpu_milli,
        "memory_mib": rec.node.memory_mib,
        "devices": [device_to_dict(d) for d in rec.node.devices],
        "drain_to": None
        if target is None
        else {
            "cpu_milli": target.cpu_milli,
            "memory_mib": target.memory_mib,
            "devices": [device_to_dict(d) for d in target.devices],
        },
    }


def drain_target(row: object) -> Node | None:
    """The registered node a drain waits to serve (``drain_to``), or None."""
    r = dict(row)  # type: ignore[call-overload]
    to = r.get("drain_to")
    if not to:
        return None
    return replace(
        node_from_row(r),
        cpu_milli=int(to["cpu_milli"]),
        memory_mib=int(to["memory_mib"]),
        devices=tuple(device_from_dict(d) for d in to["devices"]),
    )


def device_to_dict(d: Device) -> dict[str, object]:
    extra = {k: getattr(d, k) for k in _SITE_FIELDS if getattr(d, k) is not None}
    return {**DeviceIn.from_device(d).model_dump(), **extra}


def allocation_to_dict(a: Allocation) -> dict[str, object]:
    return {
        "id": a.id,
        "request_name": a.request_name,
        "replica": a.replica,
        "node": a.node,
        "cpu_milli": a.cpu_milli,
        "memory_mib": a.memory_mib,
        "priority": a.priority,
        **({"guaranteed": True} if a.guaranteed else {}),
        "devices": [
            {"uuid": d.uuid, "memory_mib": d.memory_mib, "core_permille": d.core_permille}
            for d in a.devices
        ],
    }


def allocation_from_dict(d: dict[str, object]) -> Allocation:
    """Slots and node index are placeholders here: :meth:`ClusterState.readdress` fixes
    them per engine."""
    devices = d["devices"]
    assert isinstance(devices, list)
    return Allocation(
        id=int(d["id"]),  # type: ignore[call-overload]
        request_name=str(d["request_name"]),
        replica=int(d["replica"]),  # type: ignore[call-overload]
        node=str(d["node"]),
        node_index=-1,
        cpu_milli=int(d["cpu_milli"]),  # type: ignore[call-overload]
        memory_mib=int(d["memory_mib"]),  # type: ignore[call-overload]
        devices=tuple(
            DeviceShare(str(x["uuid"]), -1, int(x["memory_mib"]), int(x["core_permille"]))
            for x in devices
        ),
        priority=int(d.get("priority", 0)),  # type: ignore[call-overload]
        guaranteed=bool(d.get("guaranteed", False)),
    )


def held_from_row(row: object) -> HeldJob:
    """A stored job that holds devices, its allocations still to be read."""
    r = dict(row)  # type: ignore[call-overload]
    stop = None if r.get("stop_cause") is None else StopCause(r["stop_cause"])
    return HeldJob(
        r["id"],
        r["tenant"],
        r["queue"],
        r["flavor"] or "*",
        r["priority"],
        JobPhase(r["state"]),
        [],
        stop=stop,
        stop_reason=str(r["reason"]).removeprefix(STOPPING) if stop else "",
        attempt=int(r.get("attempts") or 0),
        started_at=r.get("started_at"),
        checkpoint_at=r.get("checkpoint_at"),
        max_runtime_s=r.get("max_runtime_s"),
        reservation=r.get("reservation"),
        preemptible=bool(r.get("preemptible")),
        min_run_s=_min_run_s(r.get("request")),
        idle_stop=_idle_stop(r.get("request")),
        kind=_kind(r.get("request")),
        elastic=_elastic(r.get("request")),
        movable=_movable(r),
    )


def _idle_stop(request: object) -> IdleStop | None:
    """The stored request's ``idle_stop`` (written canonical, so valid)."""
    text = request.get("idle_stop") if isinstance(request, dict) else None
    return None if text is None else parse_idle_stop("idle_stop", text)


def _elastic(request: object) -> Request | None:
    """The stored request when it is elastic (a ``replicas`` range), else None."""
    replicas = request.get("replicas") if isinstance(request, dict) else None
    return request_from_dict(request) if isinstance(replicas, (dict, str)) else None


def _movable(r: Mapping[str, Any]) -> Request | None:
    """A held job's request as it would be placed again after a move (its site kept), when it
    may be moved to defragment (:func:`movable_request`), else None. Built only for a request
    that declares a checkpoint signal: every other held job costs no parse."""
    stored = r.get("request")
    if not isinstance(stored, dict) or stored.get("checkpoint_signal") is None:
        return None
    asked = _asked(r)
    site = r.get("site")
    return movable_request(r, asked if site is None else within_sites(asked, (site,)))


def movable_request(row: Mapping[str, Any], request: Request) -> Request | None:
    """``request`` (the job's, as placed) when the job of stored ``row`` may be moved to
    defragment: it declares a checkpoint signal (it can save its state) and a preemption
    requeues it (``retry_on`` has ``preempted`` and a retry is left), so that a move loses
    nothing but the work since its checkpoint; else None (``server/plane/defrag_moves.py``).
    Never a guaranteed job's (``model/qos.py``): a move is a stop, which its class rules out; the
    one check for defragmentation, consolidation and moves to faster cards (``movable_now``)."""
    if request.checkpoint_signal is None or not may_be_preempted(request.qos):
        return None
    policy = lc.retry_policy(row)
    if RetryCause.PREEMPTED not in policy.retry_on:
        return None
    if policy.max_retries is not None and int(row.get("retries") or 0) >= policy.max_retries:
        return None
    return request


def _kind(request: object) -> str | None:
    """The stored request's ``kind`` (written canonical, so valid)."""
    kind = request.get("kind") if isinstance(request, dict) else None
    return None if kind is None else str(kind)


def _min_run_s(request: object) -> float | None:
    """The stored request's ``min_run`` (written canonical, so valid), in seconds."""
    text = request.get("min_run") if isinstance(request, dict) else None
    return None if text is None else parse_duration("min_run", text, MAX_MIN_RUN_S)


def pending_from_row(row: object) -> PendingJob:
    r = dict(row)  # type: ignore[call-overload]
    job = PendingJob(r["id"], r["tenant"], r["queue"], r["priority"], _asked(r), r["created_at"])
    job.not_before = float(r.get("not_before") or 0.0)
    job.max_runtime_s = r.get("max_runtime_s")
    job.reservation = r.get("reservation")
    job.preemptible = bool(r.get("preemptible"))
    job.attempts = int(r.get("attempts") or 0)
    if r.get("site") is not None:
        job.keep_to(r["site"])
    return job


def _asked(r: Mapping[str, Any]) -> Request:
    """A stored job's request as the plane admits it, before any site it was dispatched to."""
    # not in the stored request form: an image job needs a node with a container runtime
    req = replace(request_from_dict(r["request"]), container=r["image"] is not None)
    return gang_request(req)


def gang_request(req: Request) -> Request:
    """The server admits a job's replicas together (Kueue admits a workload as a whole)."""
    return req if req.gang or req.replicas == 1 else replace(req, gang=True)


def tenant_weights(conn: Connection) -> dict[str, float]:
    return {r.name: r.weight for r in conn.execute(select(t_tenants))}


# ---------------------------------------------------------------------------- node rows
IDLE_CHUNK = 500
"""Node names per UPDATE of many heartbeats (SQLite's older builds bind at most 999)."""


def upsert_node(
    conn: Connection, name: str, values: Mapping[str, object], registered_at: float
) -> None:
    """Store a registration of node ``name``: its row updated with ``values``, or added (a new
    node, uncordoned, registered at ``registered_at``; a row a start could not read is taken
    over, not added)."""
    stored = conn.execute(select(t_nodes.c.name).where(t_nodes.c.name == name)).first()
    if stored is None:
        new = {"name": name, "schedulable": True, "cordoned_devices": []}
        row = {**new, "registered_at": registered_at, **values}
        conn.execute(insert(t_nodes).values(**row))
    else:
        conn.execute(update(t_nodes).where(t_nodes.c.name == name).values(**values))


def insert_nodes(conn: Connection, rows: list[dict[str, object]]) -> None:
    """New node rows in one statement (``storage/driver_insert.py``): a 5,000-node cluster file
    was 5,000 INSERTs, seconds holding SQLite's write lock at a first start on a loaded host, and
    the store's lease renewal waits behind that lock (``server/ownership.py``): CI saw a start
    lose its store."""
    insert_rows(conn, t_nodes, rows)


def update_node(conn: Connection, name: str, values: Mapping[str, object]) -> None:
    conn.execute(update(t_nodes).where(t_nodes.c.name == name).values(**values))


def mark_site_drained(conn: Connection, names: Iterable[str], drained: bool) -> None:
    """Whether each of ``names`` is cordoned by its site's drain (``nodes.site_drained``)."""
    chosen = list(names)
    if chosen:
        conn.execute(update(t_nodes).where(t_nodes.c.name.in_(chosen)).values(site_drained=drained))


def site_drained_nodes(conn: Connection, site: str) -> set[str]:
    """The nodes of ``site`` that its drain cordoned (and its undrain uncordons)."""
    query = select(t_nodes.c.name).where(t_nodes.c.site == site, t_nodes.c.site_drained.is_(True))
    return set(conn.execute(query).scalars())


def touch_nodes(conn: Connection, names: list[str], now: float) -> None:
    """``last_heartbeat`` of every node of ``names`` is ``now``: one UPDATE per ``IDLE_CHUNK``."""
    if len(names) == 1:
        update_node(conn, names[0], {"last_heartbeat": now})
        return
    for k in range(0, len(names), IDLE_CHUNK):
        chunk = names[k : k + IDLE_CHUNK]
        conn.execute(update(t_nodes).where(t_nodes.c.name.in_(chunk)).values(last_heartbeat=now))


def delete_node(conn: Connection, name: str) -> list[int]:
    """Node ``name``'s row and its wanted re-cuts go, and every live credential bound to it
    (agent tokens, a bootstrap token pinned to its name) is revoked; returns the revoked token
    ids."""
    bound = select(t_tokens.c.id).where(
        t_tokens.c.node == name,
        t_tokens.c.role.in_(sorted(AGENT_ROLES)),
        t_tokens.c.revoked.is_(False),
    )
    revoked = [int(i) for i in conn.execute(bound).scalars()]
    if revoked:
        conn.execute(update(t_tokens).where(t_tokens.c.id.in_(revoked)).values(revoked=True))
    conn.execute(delete(t_nodes).where(t_nodes.c.name == name))
    conn.execute(delete(card_layouts).where(card_layouts.c.node == name))  # its wanted re-cuts
    return revoked


# ---------------------------------------------------------------------------- reading the books
@dataclass
class Books:
    """What the store holds, as the plane's books: nodes (``notes``: (node, why) for rows set
    aside, to be cordoned and reported), queues, held and pending jobs (``unreadable``: the
    allocation rows that could not be parsed), and the next ids."""

    nodes: dict[str, NodeRecord] = field(default_factory=dict)
    notes: list[tuple[str, str]] = field(default_factory=list)
    queue_specs: dict[str, QueueSpec] = field(default_factory=dict)
    queue_profiles: dict[str, str] = field(default_factory=dict)
    held: dict[int, HeldJob] = field(default_factory=dict)
    unreadable: list[Problem] = field(default_factory=list)
    pending: list[PendingJob] = field(default_factory=list)
    next_job_id: int = 1
    first_allocation_id: int = 1


def read_books(conn: Connection, monotonic: Callable[[], float]) -> Books:
    """Every book the plane keeps, read from the store (``monotonic``: the plane's clock, from
    which a restarted server counts each node's silence)."""
    books = Books()
    owners: dict[str, str] = {}  # device UUID -> node: the node registered first keeps it
    by_age = select(t_nodes).order_by(t_nodes.c.registered_at, t_nodes.c.name)
    for row in conn.execute(by_age).mappings():
        rec = _node_record(row, owners, books.notes, monotonic)
        if rec is not None:
            books.nodes[rec.node.name] = rec
    weights = tenant_weights(conn)
    for row in conn.execute(select(t_queues)).mappings():
        books.queue_specs[row["name"]] = queue_spec(
            row["name"],
            row["tenant"],
            row["cohort"],
            row["quotas"],
            weights[row["tenant"]],
            row["preemption"],
            row["unlisted_flavors"],
            row["allow_unfittable"],
            row["preempts_min_run"],
        )
        if row["profile"] is not None:
            books.queue_profiles[row["name"]] = row["profile"]
    held_rows = conn.execute(
        select(t_jobs)
        .where(t_jobs.c.state.in_([st.value for st in HOLDING_STATES]))
        .order_by(t_jobs.c.id)
    ).mappings()
    for row in held_rows:
        books.held[row["id"]] = held_from_row(row)
    for row in conn.execute(select(t_allocs).order_by(t_allocs.c.id)).mappings():
        job = books.held.get(row["job_id"])
        if job is None:
            continue
        try:
            job.allocations.append(allocation_from_dict(row["data"]))
        except (KeyError, TypeError, ValueError, AssertionError):
            why = f"allocation row {row['id']} of job {job.id} cannot be read"
            books.unreadable.append(Problem(job.id, why))
    top = conn.execute(select(func.max(t_jobs.c.id))).scalar()
    first = conn.execute(select(t_pool.c.first_job_id)).scalar()
    books.next_job_id = max(int(top or 0) + 1, int(first or 1))
    books.first_allocation_id = first_allocation_id(conn)
    pending_rows = conn.execute(
        select(t_jobs).where(t_jobs.c.state == JobPhase.PENDING.value)
    ).mappings()
    books.pending = [pending_from_row(row) for row in pending_rows]
    return books


def _node_record(
    row: Any, owners: dict[str, str], notes: list[tuple[str, str]], monotonic: Callable[[], float]
) -> NodeRecord | None:
    """A stored node as a record, or None (noted) when its row cannot be read. A device UUID
    an older node has already is left out of it, and the node noted to be cordoned."""
    name = str(row["name"])
    try:
        node, target = node_from_row(row), drain_target(row)
    except (ValueError, TypeError, KeyError) as exc:  # pydantic's errors are ValueErrors
        why = f"node {name} cannot be read ({type(exc).__name__}): left out until it registers"
        notes.append((name, why))
        return None
    taken = [d.uuid for d in node.devices if d.uuid in owners]
    if taken:
        text = f"node {name}: device {taken[0]} is node {owners[taken[0]]}'s too: left out"
        notes.append((name, f"{text}, node cordoned"))
        node = replace(node, devices=tuple(d for d in node.devices if d.uuid not in owners))
        target = None
    owners.update((d.uuid, name) for d in node.devices)
    return NodeRecord(
        node=node,
        source=row["source"],
        status=NodeStatus(row["status"]),
        cordoned=not row["schedulable"],
        cordoned_devices=set(row["cordoned_devices"]),
        arch=row["arch"],
        os=row["os"],
        registered_at=row["registered_at"],
        last_heartbeat=row["last_heartbeat"],
        # a restart is not the agents' fault: liveness counts from the restart, a full grace
        heard_at=None if row["last_heartbeat"] is None else monotonic(),
        target=target,
        deleting_since=row["deleting_since"],
    )


def last_requests(conn: Connection, limit: int) -> list[Request]:
    """The requests of the last ``limit`` jobs submitted, oldest first; a stored request that
    no longer decodes is skipped (it is reported where the job is read)."""
    rows = conn.execute(select(t_jobs.c.request).order_by(t_jobs.c.id.desc()).limit(limit)).all()
    requests = []
    for (data,) in reversed(rows):
        try:
            requests.append(request_from_dict(data))
        except (RequestError, KeyError, TypeError, ValueError):
            continue
    return requests


# ---------------------------------------------------------------------------- job rows
def job_row(conn: Connection, job_id: int) -> Any:
    """Job ``job_id``'s row (it is stored)."""
    return conn.execute(select(t_jobs).where(t_jobs.c.id == job_id)).mappings().one()


def job_phase(conn: Connection, job_id: int) -> JobPhase | None:
    """Job ``job_id``'s stored phase (None: not stored)."""
    stored = conn.execute(select(t_jobs.c.state).where(t_jobs.c.id == job_id)).scalar()
    return None if stored is None else JobPhase(stored)


def write_job(
    conn: Connection, job_id: int, cols: Mapping[str, object], event: Mapping[str, object]
) -> None:
    """Job ``job_id``'s columns ``cols`` and one event row, at the driver level
    (``storage/driver_insert.py``)."""
    update_rows(conn, job_update(tuple(sorted(cols))), [job_update_params(job_id, dict(cols))])
    insert_rows(conn, t_events, [dict(event)])


def delete_allocations(conn: Connection, job_id: int) -> None:
    conn.execute(delete(t_allocs).where(t_allocs.c.job_id == job_id))


def delete_jobs(conn: Connection, job_ids: list[int], next_job_id: int) -> None:
    """Finished jobs ``job_ids`` go (rows and events); the pool's first job id moves up to
    ``next_job_id``, so that no id is handed out again. A job's pod row (a Kubernetes site's
    kubectl pod it stood for) goes with it."""
    conn.execute(delete(t_events).where(t_events.c.job_id.in_(job_ids)))
    site_pod_rows.delete_rows(conn, job_ids)
    conn.execute(delete(t_jobs).where(t_jobs.c.id.in_(job_ids)))
    conn.execute(
        update(t_pool).where(t_pool.c.first_job_id < next_job_id).values(first_job_id=next_job_id)
    )


def job_tenants(conn: Connection) -> dict[int, str]:
    """Every stored job's tenant, by id (what each tenant's kept logs take)."""
    rows = conn.execute(select(t_jobs.c.id, t_jobs.c.tenant))
    return {int(job_id): str(tenant) for job_id, tenant in rows}


def mark_opened(conn: Connection, at: float) -> None:
    """A write that changes nothing else: the store takes writes again."""
    conn.execute(update(t_pool).values(opened_at=at))
