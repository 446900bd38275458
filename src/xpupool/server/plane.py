"""The control plane's live state: one engine, one admission book, the store, and one lock.

Decide (engine), then persist (store), then act (agents). Every change takes ``lock``, changes the
engine, and writes the store in one transaction before the lock is let go; if the write fails the
engine change is undone. On start the engine is rebuilt from the store alone (nodes, then the
allocation rows), so what a crash leaves behind is exactly what was committed.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import Connection, Update, bindparam, delete, func, insert, select, update

from xpupool.engine import kernels
from xpupool.engine.admission import Admission, QueueSpec, Quota, Resource
from xpupool.engine.engine import Engine
from xpupool.engine.profile import DEFAULT_PROFILE
from xpupool.engine.state import ClusterState
from xpupool.model.allocation import Allocation, DeviceShare
from xpupool.model.device import Device, Node
from xpupool.model.errors import RequestError
from xpupool.model.request import Request
from xpupool.model.request_json import request_from_dict
from xpupool.server import schemas as s
from xpupool.server.auth import Principal
from xpupool.server.storage import meta
from xpupool.server.storage.fleet import nodes as t_nodes
from xpupool.server.storage.jobs import allocations as t_allocs
from xpupool.server.storage.jobs import job_events as t_events
from xpupool.server.storage.jobs import jobs as t_jobs
from xpupool.server.storage.tenants import queues as t_queues
from xpupool.server.storage.tenants import tenants as t_tenants

log = logging.getLogger("xpupool.server")


@dataclass
class NodeRecord:
    """A node as the plane knows it; ``node`` is what the engine schedules on."""

    node: Node
    source: str
    status: s.NodeStatus
    cordoned: bool
    cordoned_devices: set[str]
    arch: str
    os: str
    registered_at: float
    last_heartbeat: float | None = None


@dataclass
class PendingJob:
    """A job waiting for admission. ``tried`` is the capacity generation it last failed at: it is
    not tried again until something is released, added or uncordoned (kube's unschedulable queue)."""

    id: int
    tenant: str
    queue: str
    priority: int
    request: Request
    created_at: float
    tried: int = -1
    reason: str = ""
    waiting_on: set[int] = field(default_factory=set)  # victims it preempted, still stopping


@dataclass
class HeldJob:
    """A job holding devices (admitted, scheduled or running). ``stopping`` says why its processes
    are being stopped ('cancel', 'preempt', 'failed'); its devices are freed when they are gone."""

    id: int
    tenant: str
    queue: str
    flavor: str
    priority: int
    state: s.JobState
    allocations: list[Allocation]
    replica_states: dict[int, str] = field(default_factory=dict)
    exit_codes: dict[int, int] = field(default_factory=dict)
    stopping: str | None = None
    stop_reason: str = ""
    handed: set[int] = field(default_factory=set)  # replicas handed to an agent: may be running
    # {replica: {uuid: MiB}}: the agent's last per-process measurement of a running replica;
    # absent when not measured; gone with the job when it is released (metrics only, not stored)
    device_memory_used_mib: dict[int, dict[str, int]] = field(default_factory=dict)

    @property
    def may_run(self) -> bool:
        """True once an agent may have started a process: stopping must then wait for it."""
        return self.state is s.JobState.RUNNING or bool(self.handed)


# Statements built once: building one per call (``update(...).values(...)``) cost more CPU than
# running it, on the scheduler's path for every job.
INSERT_EVENT = insert(t_events)


@functools.lru_cache(maxsize=64)
def _job_update(extra: tuple[str, ...]) -> Update:
    """``UPDATE jobs SET state, reason, updated_at[, extra...] WHERE id = :b_id`` with bound values
    named ``b_<column>``."""
    columns = ("state", "reason", "updated_at", *extra)
    return (
        update(t_jobs)
        .where(t_jobs.c.id == bindparam("b_id"))
        .values({c: bindparam(f"b_{c}") for c in columns})
    )


class ControlPlane:
    """Everything the API and the agents act on. Thread-safe through ``lock``."""

    def __init__(
        self,
        db_url: str,
        data_dir: Path,
        *,
        seed: int = 0,
        profile: str = DEFAULT_PROFILE,
        heartbeat_s: float = 5.0,
        lost_after_s: float = 30.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.data_dir = data_dir
        self.logs_dir = data_dir / "logs"
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        self.db = meta.connect(db_url)
        self.seed = seed
        self.profile = profile
        self.heartbeat_s = heartbeat_s
        self.lost_after_s = lost_after_s
        self.clock = clock
        self.lock = threading.RLock()
        self.wake = threading.Event()
        self.capacity_gen = 0
        self.next_job_id = 1
        self.principals: dict[str, Principal] = {}  # token hash -> principal, live tokens only
        self.nodes: dict[str, NodeRecord] = {}
        self.metrics: dict[str, s.DeviceMetrics] = {}
        self.pending: dict[int, PendingJob] = {}
        self.held: dict[int, HeldJob] = {}
        self.queue_specs: dict[str, QueueSpec] = {}
        self.engine: Engine
        self.admission: Admission
        self.observers: list[Callable[[str, float], None]] = []  # (event, seconds) for metrics
        self._load()

    # ------------------------------------------------------------------ loading and rebuilding
    def _load(self) -> None:
        with self.db.connect() as conn:
            for row in conn.execute(select(t_nodes)).mappings():
                self.nodes[row["name"]] = NodeRecord(
                    node=node_from_row(row),
                    source=row["source"],
                    status=s.NodeStatus(row["status"]),
                    cordoned=not row["schedulable"],
                    cordoned_devices=set(row["cordoned_devices"]),
                    arch=row["arch"],
                    os=row["os"],
                    registered_at=row["registered_at"],
                    # a restart is not the agents' fault: every node gets a fresh grace period
                    last_heartbeat=None if row["last_heartbeat"] is None else self.clock(),
                )
            weights = tenant_weights(conn)
            for row in conn.execute(select(t_queues)).mappings():
                self.queue_specs[row["name"]] = queue_spec(
                    row["name"], row["tenant"], row["cohort"], row["quotas"], weights[row["tenant"]]
                )
            held_rows = conn.execute(
                select(t_jobs).where(t_jobs.c.state.in_([st.value for st in s.HOLDING_STATES]))
            ).mappings()
            for row in held_rows:
                self.held[row["id"]] = HeldJob(
                    row["id"],
                    row["tenant"],
                    row["queue"],
                    row["flavor"] or "*",
                    row["priority"],
                    s.JobState(row["state"]),
                    [],
                )
            for row in conn.execute(select(t_allocs).order_by(t_allocs.c.id)).mappings():
                job = self.held.get(row["job_id"])
                if job is not None:
                    job.allocations.append(allocation_from_dict(row["data"]))
            top = conn.execute(select(func.max(t_jobs.c.id))).scalar()
            self.next_job_id = int(top or 0) + 1
            pending_rows = conn.execute(
                select(t_jobs).where(t_jobs.c.state == s.JobState.PENDING.value)
            ).mappings()
            for row in pending_rows:
                self.pending[row["id"]] = pending_from_row(row)
        kernels.warm()  # the fragmentation loops compiled before the first request, not during it
        self.rebuild_engine()

    def rebuild_engine(self) -> None:
        """A fresh engine from the node records, with every held allocation re-applied and
        re-charged. Used on start, when a node re-registers with other devices, and when queues
        change; rare, so rebuilding beats patching."""
        state = ClusterState([r.node for r in self.nodes.values()], seed=self.seed)
        for rec in self.nodes.values():
            if rec.cordoned or rec.status is s.NodeStatus.LOST:
                state.set_node_schedulable(rec.node.name, False)
            for uuid in rec.cordoned_devices:
                if uuid in state.uuid_slot:
                    state.set_device_cordoned(uuid, True)
        self.engine = Engine(state, self.profile, seed=self.seed)
        self.admission = Admission(self.engine, self.queue_specs.values())
        for job in self.held.values():
            fresh = []
            for alloc in job.allocations:
                readdressed = readdress(state, alloc)
                if readdressed is None:
                    log.warning("allocation %d of job %d lost its devices", alloc.id, job.id)
                    continue
                self.admission.restore(readdressed, job.queue, job.flavor)
                fresh.append(readdressed)
            job.allocations = fresh
        self.capacity_gen += 1

    def bump(self) -> None:
        """Capacity may have grown: pending jobs are worth trying again."""
        self.capacity_gen += 1
        self.wake.set()

    def rebuild_admission(self) -> None:
        """New quota books after queues changed, re-charged from the held allocations."""
        with self.lock:
            self.admission = Admission(self.engine, self.queue_specs.values())
            for job in self.held.values():
                for alloc in job.allocations:
                    self.admission.restore(alloc, job.queue, job.flavor, in_engine=False)
            self.capacity_gen += 1
            self.wake.set()

    # ------------------------------------------------------------------ store helpers
    @contextmanager
    def write(self) -> Iterator[Connection]:
        """One store transaction under the plane's lock; commits on success."""
        with self.lock, self.db.begin() as conn:
            yield conn

    def set_state(
        self, conn: Connection, job_id: int, state: s.JobState, reason: str, **values: object
    ) -> None:
        """Move a job to ``state`` and record the transition as an event."""
        now = self.clock()
        params: dict[str, object] = {
            "b_id": job_id,
            "b_state": state.value,
            "b_reason": reason,
            "b_updated_at": now,
        }
        params.update({f"b_{k}": v for k, v in values.items()})
        conn.execute(_job_update(tuple(sorted(values))), params)
        conn.execute(
            INSERT_EVENT, {"job_id": job_id, "at": now, "state": state.value, "reason": reason}
        )

    def release_job(self, conn: Connection, job: HeldJob) -> None:
        """Give back every allocation of ``job`` (engine, quota and store)."""
        for alloc in job.allocations:
            self.admission.release(alloc.id)
        conn.execute(delete(t_allocs).where(t_allocs.c.job_id == job.id))
        job.allocations = []
        self.held.pop(job.id, None)
        self.bump()

    def requeue(self, conn: Connection, job: HeldJob, reason: str) -> None:
        """Release ``job`` and put it back in its queue with one more attempt counted."""
        self.release_job(conn, job)
        row = conn.execute(select(t_jobs).where(t_jobs.c.id == job.id)).mappings().one()
        self.set_state(conn, job.id, s.JobState.PENDING, reason, attempts=row["attempts"] + 1)
        self.pending[job.id] = pending_from_row(row)

    def log_path(self, job_id: int, replica: int) -> Path:
        return self.logs_dir / str(job_id) / f"{replica}.log"

    def notify(self, event: str, seconds: float) -> None:
        for observer in self.observers:
            observer(event, seconds)


# ---------------------------------------------------------------------------- row conversions
def device_from_dict(d: dict[str, object]) -> Device:
    return Device(**s.DeviceIn.model_validate(d).model_dump())


def node_from_row(row: object) -> Node:
    r = dict(row)  # type: ignore[call-overload]
    return Node(
        name=r["name"],
        cpu_milli=int(r["cpu_milli"]),
        memory_mib=int(r["memory_mib"]),
        devices=tuple(device_from_dict(d) for d in r["devices"]),
        site=r["site"],
        labels=r["labels"],
    )


def device_to_dict(d: Device) -> dict[str, object]:
    return {
        "uuid": d.uuid,
        "vendor": d.vendor,
        "model": d.model,
        "memory_mib": d.memory_mib,
        "index": d.index,
        "compute_units": d.compute_units,
        "driver_version": d.driver_version,
        "runtimes": dict(d.runtimes),
        "numa_node": d.numa_node,
        "link_group": d.link_group,
        "healthy": d.healthy,
    }


def allocation_to_dict(a: Allocation) -> dict[str, object]:
    return {
        "id": a.id,
        "request_name": a.request_name,
        "replica": a.replica,
        "node": a.node,
        "cpu_milli": a.cpu_milli,
        "memory_mib": a.memory_mib,
        "priority": a.priority,
        "devices": [
            {"uuid": d.uuid, "memory_mib": d.memory_mib, "core_permille": d.core_permille}
            for d in a.devices
        ],
    }


def allocation_from_dict(d: dict[str, object]) -> Allocation:
    """Slots and node index are placeholders here: :func:`readdress` fixes them per engine."""
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
    )


def readdress(state: ClusterState, a: Allocation) -> Allocation | None:
    """``a`` with this state's node index and slots; None if its node or a device is gone."""
    node = state.node_index.get(a.node)
    if node is None or any(d.uuid not in state.uuid_slot for d in a.devices):
        return None
    shares = tuple(
        DeviceShare(d.uuid, state.uuid_slot[d.uuid], d.memory_mib, d.core_permille)
        for d in a.devices
    )
    return Allocation(
        a.id, a.request_name, a.replica, a.node, node, a.cpu_milli, a.memory_mib, shares, a.priority
    )


def queue_spec(
    name: str, tenant: str, cohort: str | None, quotas: Iterable[object], weight: float = 1.0
) -> QueueSpec:
    """The engine's queue from stored JSON quotas; ``weight`` is the tenant's fair-share weight."""
    out = []
    for q in quotas:
        qi = s.QuotaIn.model_validate(q)
        out.append(Quota(qi.flavor, Resource(qi.resource.value), qi.nominal, qi.borrowing_limit))
    return QueueSpec(name, tenant, tuple(out), cohort, weight)


def pending_from_row(row: object) -> PendingJob:
    r = dict(row)  # type: ignore[call-overload]
    req = request_from_dict(r["request"])
    return PendingJob(
        r["id"], r["tenant"], r["queue"], r["priority"], gang_request(req), r["created_at"]
    )


def gang_request(req: Request) -> Request:
    """The server admits a job's replicas together (Kueue admits a workload as a whole)."""
    from dataclasses import replace

    return req if req.gang or req.replicas == 1 else replace(req, gang=True)


def tenant_weights(conn: Connection) -> dict[str, float]:
    return {r.name: r.weight for r in conn.execute(select(t_tenants))}


def check_request_names(engine: Engine, req: Request) -> None:
    """Fail early on a policy name the engine does not know (the field is named)."""
    if req.node_policy and req.node_policy not in engine.profiles:
        raise RequestError(
            "request.node_policy",
            req.node_policy,
            f"unknown policy; known: {', '.join(sorted(engine.profiles))}",
        )
