"""The control plane's live state: one engine, one admission book, the store, and one lock.

Decide (engine), then persist (store), then act (agents). Every change takes ``lock``, changes the
engine, and writes the store in one transaction before the lock is let go; if the write fails the
engine change is undone. On start the engine is rebuilt from the store alone (nodes, then the
allocation rows), so what a crash leaves behind is exactly what was committed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field, replace
from dataclasses import fields as dataclass_fields
from pathlib import Path
from types import MappingProxyType
from typing import Any

from sqlalchemy import Connection, delete, func, select, update
from sqlalchemy.exc import OperationalError

from xpupool.catalog.images import ImageCatalog, default_image_catalog
from xpupool.disk_reserve import DEFAULT_LOG_RESERVE_BYTES
from xpupool.engine.cycle.admission import Admission, QueueSpec
from xpupool.engine.cycle.cycle import SchedulingCycle
from xpupool.engine.engine import Engine
from xpupool.engine.fragmentation import kernels
from xpupool.engine.host import EngineHost, HostedNode
from xpupool.engine.learning_pace import LearningPace
from xpupool.engine.profile import BUILTIN_PROFILES, DEFAULT_PROFILE, Profile
from xpupool.engine.state import ClusterState
from xpupool.engine.verdict import Verdicts
from xpupool.model.allocation import Allocation, DeviceShare
from xpupool.model.device import Device, Node
from xpupool.model.errors import RequestError, Unavailable
from xpupool.model.request import Request
from xpupool.model.request_model import request_from_dict
from xpupool.model.taint import Taint
from xpupool.server import job_lifecycle as lc
from xpupool.server.audit import AuditKeep, AuditLog
from xpupool.server.auth import AGENT_ROLES, Principal
from xpupool.server.consistency import Problem, problem_for, settle
from xpupool.server.drain import draining, plan
from xpupool.server.health import Health, probe_writable, store_failure
from xpupool.server.job_logs import JobLogs
from xpupool.server.lease import Lease
from xpupool.server.live_metrics import LiveMetrics
from xpupool.server.ownership import StoreOwnership
from xpupool.server.pending_jobs import PendingJobs
from xpupool.server.queue_spec import queue_spec
from xpupool.server.retention import Retention
from xpupool.server.schemas.agent_protocol import DeviceIn, DeviceMetrics, ReplicaState
from xpupool.server.schemas.jobs import HOLDING_STATES, JobPhase, StopCause
from xpupool.server.schemas.nodes import NodeStatus
from xpupool.server.storage import meta
from xpupool.server.storage.driver_insert import insert_rows, update_rows
from xpupool.server.storage.fleet import nodes as t_nodes
from xpupool.server.storage.job_writes import JobWrites, job_update, job_update_params
from xpupool.server.storage.jobs import allocations as t_allocs
from xpupool.server.storage.jobs import job_events as t_events
from xpupool.server.storage.jobs import jobs as t_jobs
from xpupool.server.storage.pool import first_allocation_id
from xpupool.server.storage.pool import pool as t_pool
from xpupool.server.storage.tenants import assign_tenant_indices
from xpupool.server.storage.tenants import queues as t_queues
from xpupool.server.storage.tenants import tenants as t_tenants
from xpupool.server.storage.tenants import tokens as t_tokens
from xpupool.server.wake import Wake

log = logging.getLogger("xpupool.server")
DEFAULT_MAX_LOG_BYTES = 64 << 20
DEFAULT_HISTORY_INTERVAL_S = 60.0  # seconds between two fleet history samples
SEED_JOBS = 2000  # the last jobs a restarted engine learns its workload from (_seed_learning)


@dataclass
class NodeRecord:
    """A node as the plane knows it; ``node`` is what the engine schedules on.

    Two times say when it was last heard from: ``last_heartbeat`` (Unix time, stored and shown to
    people) and ``heard_at`` (the plane's ``monotonic`` seconds: what liveness counts from,
    never stored). Liveness never subtracts wall-clock times: a step of the wall clock (NTP,
    ``date -s``) must neither make a heartbeating node lost, and run its jobs a second time
    elsewhere, nor keep a dead one ready (issue 43, item 9)."""

    node: Node
    source: str
    status: NodeStatus
    cordoned: bool
    cordoned_devices: set[str]
    arch: str
    os: str
    registered_at: float
    last_heartbeat: float | None = None
    heard_at: float | None = None  # monotonic; None: never heard from (silent for ever)
    target: Node | None = None  # registered, waiting for allocations on ``node`` to end (a drain)
    # Unix time the admin asked to delete it once nothing is held there (cordoned meanwhile)
    deleting_since: float | None = None

    def heard(self, wall: float, monotonic: float) -> None:
        """A heartbeat (or a registration) arrived at ``wall`` Unix time, ``monotonic`` on the
        plane's monotonic clock."""
        self.last_heartbeat, self.heard_at = wall, monotonic

    @property
    def draining(self) -> frozenset[str]:
        """Devices served until their allocations end, then dropped or changed: cordoned."""
        return draining(self.node, self.target)


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
    not_before: float = 0.0  # Unix time: a retry waiting out its backoff is not tried before
    max_runtime_s: float | None = None  # what each run may last (held with the job once placed)
    attempts: int = 0  # runs started before (a retry's, held with the job once placed)


@dataclass
class HeldJob:
    """A job holding devices (admitted, scheduled or running). ``stop`` says why its processes
    are being stopped (stored with the job); its devices are freed when they are gone. Only
    :meth:`ControlPlane.apply` changes ``state``, ``stop`` and ``attempt``."""

    id: int
    tenant: str
    queue: str
    flavor: str
    priority: int
    state: JobPhase
    allocations: list[Allocation]
    replica_states: dict[int, ReplicaState] = field(default_factory=dict)
    exit_codes: dict[int, int] = field(default_factory=dict)
    stop: StopCause | None = None
    stop_reason: str = ""
    attempt: int = 0  # runs started (the stored ``attempts``)
    started_at: float | None = None  # Unix time its current run started (max_runtime_s)
    max_runtime_s: float | None = None
    handed: set[int] = field(default_factory=set)  # replicas handed to an agent: may be running
    dispatched: bool = False  # this server handed its current run out (counted in ``attempt``)
    # {replica: {uuid: MiB}}: the agent's last per-process measurement of a running replica;
    # absent when not measured; gone with the job when it is released (metrics only, not stored)
    device_memory_used_mib: dict[int, dict[str, int]] = field(default_factory=dict)
    limits: dict[int, str] = field(default_factory=dict)  # {replica: enforcement, recorded}
    failures: dict[int, str] = field(default_factory=dict)  # {replica: the agent's reason}

    @property
    def may_run(self) -> bool:
        """True once an agent may have started a process: stopping must then wait for it."""
        return self.state is JobPhase.RUNNING or bool(self.handed)

    @property
    def stopping(self) -> str | None:
        """The stop as the scheduling cycle reads it (``RunningWork``): 'preempt' for a victim of
        an earlier decision, the cause's name for any other stop, None when not stopping."""
        if self.stop is None:
            return None
        return "preempt" if self.stop is StopCause.PREEMPTED else self.stop.value


@dataclass
class Built:
    """An engine made by :meth:`ControlPlane.build`, not yet served: the allocations it holds per
    held job, and those it could not re-apply."""

    engine: Engine
    admission: Admission
    allocations: dict[int, list[Allocation]]
    problems: list[Problem]


# What a HeldJob keeps in the store; every other field is live bookkeeping a reload carries over.
_STORED_HELD = frozenset(
    {
        "id",
        "tenant",
        "queue",
        "flavor",
        "priority",
        "state",
        "allocations",
        "stop",
        "stop_reason",
        "attempt",
        "started_at",
        "max_runtime_s",
    }
)
STOPPING = lc.STOPPING  # how a stored reason starts while the job's replicas are stopped


def carry_transients(before: HeldJob, after: HeldJob) -> None:
    """Copy what the store does not keep (replica states, stop requests, measurements)."""
    for f in dataclass_fields(HeldJob):
        if f.name not in _STORED_HELD:
            setattr(after, f.name, getattr(before, f.name))


class ControlPlane:
    """Everything the API and the agents act on. Thread-safe through ``lock``."""

    def __init__(
        self,
        db_url: str,
        data_dir: Path,
        *,
        seed: int = 0,
        profile: str = DEFAULT_PROFILE,
        profiles: Mapping[str, Profile] | None = None,
        heartbeat_s: float = 5.0,
        lost_after_s: float = 30.0,
        lease_s: float | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        max_log_bytes: int = DEFAULT_MAX_LOG_BYTES,
        logs_dir: Path | None = None,
        log_reserve_bytes: int = DEFAULT_LOG_RESERVE_BYTES,
        retention: Retention | None = None,
        audit_keep: AuditKeep | None = None,
        history_interval_s: float = DEFAULT_HISTORY_INTERVAL_S,
        image_catalog: ImageCatalog | None = None,
        ownership: StoreOwnership | None = None,
    ) -> None:
        self.data_dir = data_dir
        # what a job's image implies (catalog/images.py): an operator's rules before the built-in
        self.image_catalog = image_catalog or default_image_catalog()
        # the replicas' logs (server/job_logs.py): DATA/logs, or under ``xpupool up --logs``;
        # ``max_log_bytes``: what the server keeps of one replica's log (--log-cap)
        self.logs = JobLogs(logs_dir or data_dir / "logs", max_log_bytes, log_reserve_bytes)
        self.db = meta.connect(db_url)
        self.seed = seed
        self.profile = profile
        # the built-in profiles and those of the --profile file: what jobs and queues may name
        self.profiles: dict[str, Profile] = {**BUILTIN_PROFILES, **(profiles or {})}
        if profile not in self.profiles:
            raise RequestError(
                "--policy", profile, f"unknown profile; known: {', '.join(self.profiles)}"
            )
        self.heartbeat_s = heartbeat_s
        self.lost_after_s = lost_after_s
        self.lease = Lease.for_settings(heartbeat_s, lost_after_s, lease_s)
        self.clock = clock  # Unix time: what is stored and shown
        # what durations are timed with (node liveness, the lease of a silent node's replicas):
        # a step of the wall clock moves ``clock``, never this
        self.monotonic = monotonic
        self.lock = threading.RLock()
        # threads in write() waiting for ``lock``: a scheduling pass lets them in between its
        # batches (the lock is not fair: a thread that lets it go may take it again at once)
        self.writers_waiting = 0
        self._waiting_guard = threading.Condition()  # notified when no writer waits any more
        self.wake = Wake()  # the scheduling loop's (scheduler_loop.run_passes)
        self.learning_pace = LearningPace()  # when the scheduling loop re-learns (its _relearn)
        self.capacity_gen = 0
        self.next_job_id = 1
        # the engine over the pool (engine/host.py): it builds each engine from the node records
        # and owns the pool's one allocation id counter, raised to the stored mark on each read
        # (storage/pool.py), so no id repeats after a registration, a rebuild or a restart (issue
        # 43, item 3); learning is deferred: the scheduling pass re-learns after placing
        self.host = EngineHost(profile, profiles=self.profiles, seed=seed, defer_learning=True)
        self.principals: dict[str, Principal] = {}  # token hash -> principal, live tokens only
        self.audit = AuditLog(self.db, self.write, clock, audit_keep)  # rows kept per kind
        self.retention = retention or Retention()  # finished jobs kept (services/job_limits.py)
        if not history_interval_s > 0:
            raise RequestError("--history-interval", history_interval_s, "must be above 0 s")
        self.history_interval_s = history_interval_s  # fleet samples kept (server/history.py)
        self.nodes: dict[str, NodeRecord] = {}
        self._nodes_changed = 0  # counts changes of ``nodes`` (the agent-node list's key)
        self._agent_nodes: tuple[int, list[tuple[str, NodeRecord]]] = (-1, [])
        # nodes the admin deleted or took over while this server runs: the in-process agent,
        # which has no token to revoke, speaks for them no more (services/node_identity.py)
        self.released_nodes: set[str] = set()
        self.metrics: dict[str, DeviceMetrics] = {}
        self.live = LiveMetrics()  # the same readings as columns, and a ring per card
        self.pending: PendingJobs[PendingJob] = PendingJobs()  # counts per tenant (limits)
        self.held: dict[int, HeldJob] = {}
        self.queue_specs: dict[str, QueueSpec] = {}
        self.queue_profiles: dict[str, str] = {}  # queue -> profile of its jobs that name none
        # queue -> its and its tenant's limits as stored (services/grants.py), read once per
        # queue: every write to tenants or queues empties it (forget_grants)
        self.grant_rows: dict[str, Any] = {}
        self._writer: Connection | None = None  # the connection of write(), held (see there)
        self.admission: Admission
        self._cycle: SchedulingCycle | None = None
        self.observers: list[Callable[[str, float], None]] = []  # (event, seconds) for metrics
        self.health = Health()
        if ownership is not None:  # every commit checks the store is still this server's
            ownership.fence(self.db)
            ownership.on_lost.append(self.health.fail)  # writes and /healthz: 503, and why
        self._stale = False  # memory may be ahead of the store: reload before the next write
        self._unreadable: list[Problem] = []  # allocation rows the last read could not parse
        self._node_notes: list[tuple[str, str]] = []  # (node, why) set aside by the last read
        # called under the lock before a job id is handed out; ``xpupool up`` records the id
        # beside the database (server/datadir.py) so that no database can hand it out again
        self.before_job_id: Callable[[int], None] = lambda _job_id: None
        with self.db.begin() as conn:  # tenant name -> its stable index (the job uid's offset)
            self.tenant_index: dict[str, int] = assign_tenant_indices(conn)
        self._load()
        with self.db.connect() as conn:  # what each tenant's kept logs take (job_logs.py)
            rows = conn.execute(select(t_jobs.c.id, t_jobs.c.tenant))
            self.logs.load({int(job_id): str(tenant) for job_id, tenant in rows})

    # ------------------------------------------------------------------ loading and rebuilding
    def _load(self) -> None:
        self._read()
        kernels.warm_in_background()  # compiled while the server starts, not in a request
        self.rebuild_engine()
        self._seed_learning()
        if self._node_notes:  # node rows set aside by the read: cordoned and reported
            with self.db.begin() as conn:
                for name, text in self._node_notes:
                    if name in self.nodes and not self.nodes[name].cordoned:
                        self.cordon_node(conn, name, True)
                    self.health.note(f"store inconsistent: {text}")
        self._node_notes = []

    def _seed_learning(self) -> None:
        """A restarted server's engine learns its workload from the last jobs submitted, as the
        engine before the restart had, instead of from nothing: at 5,000 nodes a cold engine
        rebuilds the measure over every node about ten times in its first requests. A stored
        request that no longer decodes is skipped (it is reported where the job is read)."""
        with self.db.begin() as conn:
            rows = conn.execute(
                select(t_jobs.c.request).order_by(t_jobs.c.id.desc()).limit(SEED_JOBS)
            ).all()
        requests = []
        for (data,) in reversed(rows):
            try:
                requests.append(request_from_dict(data))
            except (RequestError, KeyError, TypeError, ValueError):
                continue
        self.engine.seed_learning(requests)

    def _read(self) -> None:
        """Nodes, queues, held and pending jobs from the store into the (empty) dicts."""
        self._node_notes = []
        with self.db.connect() as conn:
            owners: dict[str, str] = {}  # device UUID -> node: the node registered first keeps it
            by_age = select(t_nodes).order_by(t_nodes.c.registered_at, t_nodes.c.name)
            for row in conn.execute(by_age).mappings():
                rec = self._node_record(row, owners)
                if rec is not None:
                    self.nodes[rec.node.name] = rec
            weights = tenant_weights(conn)
            for row in conn.execute(select(t_queues)).mappings():
                self.queue_specs[row["name"]] = queue_spec(
                    row["name"],
                    row["tenant"],
                    row["cohort"],
                    row["quotas"],
                    weights[row["tenant"]],
                    row["preemption"],
                    row["unlisted_flavors"],
                    row["allow_unfittable"],
                )
                if row["profile"] is not None:
                    self.queue_profiles[row["name"]] = row["profile"]
            held_rows = conn.execute(
                select(t_jobs)
                .where(t_jobs.c.state.in_([st.value for st in HOLDING_STATES]))
                .order_by(t_jobs.c.id)
            ).mappings()
            for row in held_rows:
                self.held[row["id"]] = held_from_row(row)
            self._unreadable = []
            for row in conn.execute(select(t_allocs).order_by(t_allocs.c.id)).mappings():
                job = self.held.get(row["job_id"])
                if job is None:
                    continue
                try:
                    job.allocations.append(allocation_from_dict(row["data"]))
                except (KeyError, TypeError, ValueError, AssertionError):
                    why = f"allocation row {row['id']} of job {job.id} cannot be read"
                    self._unreadable.append(Problem(job.id, why))
            top = conn.execute(select(func.max(t_jobs.c.id))).scalar()
            first = conn.execute(select(t_pool.c.first_job_id)).scalar()
            self.next_job_id = max(int(top or 0) + 1, int(first or 1))
            self.host.ids.seen(first_allocation_id(conn) - 1)  # every id below is used
            pending_rows = conn.execute(
                select(t_jobs).where(t_jobs.c.state == JobPhase.PENDING.value)
            ).mappings()
            for row in pending_rows:
                self.pending[row["id"]] = pending_from_row(row)
        self._nodes_changed += 1

    def _node_record(self, row: Any, owners: dict[str, str]) -> NodeRecord | None:
        """A stored node as a record, or None (noted) when its row cannot be read. A device UUID
        an older node has already is left out of it, and the node noted to be cordoned."""
        name = str(row["name"])
        try:
            node, target = node_from_row(row), drain_target(row)
        except (ValueError, TypeError, KeyError) as exc:  # pydantic's errors are ValueErrors
            why = f"node {name} cannot be read ({type(exc).__name__}): left out until it registers"
            self._node_notes.append((name, why))
            return None
        taken = [d.uuid for d in node.devices if d.uuid in owners]
        if taken:
            text = f"node {name}: device {taken[0]} is node {owners[taken[0]]}'s too: left out"
            self._node_notes.append((name, f"{text}, node cordoned"))
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
            heard_at=None if row["last_heartbeat"] is None else self.monotonic(),
            target=target,
            deleting_since=row["deleting_since"],
        )

    def reload(self) -> None:
        """Memory back to what the store holds, after a write that failed part-way (the store
        rolled back; memory may have moved ahead). What the store does not keep (replica
        states, stop requests, heartbeat times) is carried over for jobs and nodes still there."""
        old_nodes, old_held, old_pending = self.nodes, self.held, self.pending
        old_specs, old_next = self.queue_specs, self.next_job_id
        old_profiles = self.queue_profiles
        self.nodes, self.held, self.queue_specs, self.queue_profiles = {}, {}, {}, {}
        self.forget_grants()
        self.pending = PendingJobs()
        try:
            self._read()
        except Exception:
            self.nodes, self.held, self.pending = old_nodes, old_held, old_pending
            self.queue_specs, self.next_job_id = old_specs, old_next
            self.queue_profiles = old_profiles
            raise
        for name, rec in self.nodes.items():
            was = old_nodes.get(name)
            if was is not None and rec.heard_at is not None:
                rec.last_heartbeat, rec.heard_at = was.last_heartbeat, was.heard_at
        for job_id, job in self.held.items():
            before = old_held.get(job_id)
            if before is not None:
                carry_transients(before, job)
        for job_id, pending in self.pending.items():
            earlier = old_pending.get(job_id)
            if earlier is not None:
                pending.reason, pending.waiting_on = earlier.reason, earlier.waiting_on
        self.rebuild_engine()
        self._stale = False

    def build(self, nodes: Mapping[str, NodeRecord]) -> Built:
        """A fresh engine over ``nodes`` with every held allocation re-applied and re-charged;
        changes nothing on the plane. Raises RequestError for a duplicate node name or device
        UUID. An allocation that cannot be re-applied (its node or a device is gone or another
        node's, or it would over-commit) is left out and described in ``problems``: the plane's
        rule for what no longer fits is to requeue those jobs by their policy with an event
        (``consistency.settle``). The engine takes its allocation ids from the host's one
        counter, so no id is handed out twice however often the engine is rebuilt."""
        engine = self.host.fresh(
            HostedNode(
                rec.node,
                not (rec.cordoned or rec.status is NodeStatus.LOST),
                frozenset(rec.cordoned_devices | rec.draining),
            )
            for rec in nodes.values()
        )
        admission = Admission(engine, self.queue_specs.values())
        held = self.held
        # one allocation per charge: a job keeps those of its allocations that still fit
        done = self.host.reapply(
            engine,
            ((job.id, (a,)) for job in held.values() for a in job.allocations),
            lambda job_id, a: admission.restore(a, held[job_id].queue, held[job_id].flavor),
        )
        kept: dict[int, list[Allocation]] = {job_id: [] for job_id in held}
        for job_id, allocations in done.kept.items():
            kept[job_id].extend(allocations)
        problems = [
            problem_for(engine.state, r.owner, r.allocations[0], r.error) for r in done.refused
        ]
        for job in held.values():
            if not job.allocations:
                problems.append(Problem(job.id, f"job {job.id} is {job.state.value} on no device"))
        return Built(engine, admission, kept, problems)

    def install(self, built: Built) -> None:
        """Serve ``built`` (made by :meth:`build` over the node records now in place); its
        engine goes on learning the workload from where the engine it replaces was."""
        self.host.install(built.engine)
        self.admission = built.admission
        for job_id, allocations in built.allocations.items():
            if job_id in self.held:
                self.held[job_id].allocations = allocations
        self.capacity_gen += 1

    @property
    def engine(self) -> Engine:
        """The engine served (the host's)."""
        engine = self.host.engine
        assert engine is not None, "no engine built yet"
        return engine

    def rebuild_engine(self, conn: Connection | None = None) -> None:
        """A fresh engine from the node records, with every held allocation re-applied and
        re-charged. Used on start, after a failed write, and when a drained device is free;
        rare, so rebuilding beats patching. What the store holds that cannot be re-applied is
        set aside (``server/consistency.py``) in ``conn``'s transaction or a new one."""
        built = self.build(self.nodes)
        self.install(built)
        problems = [*self._unreadable, *built.problems]
        self._unreadable = []
        if not problems:
            return
        if conn is not None:
            settle(self, conn, problems)
            return
        with self.db.begin() as own:
            settle(self, own, problems)

    @property
    def verdicts(self) -> Verdicts:
        """Whether a request could ever fit this pool (the host's, on the engine served)."""
        return self.host.verdicts

    @property
    def cycle(self) -> SchedulingCycle:
        """The scheduling cycle on the current quota books (rebuilt with them)."""
        if self._cycle is None or self._cycle.admission is not self.admission:
            self._cycle = SchedulingCycle(self.admission, self.verdicts)
        return self._cycle

    def bump(self) -> None:
        """Capacity may have grown: pending jobs are worth trying again."""
        self.capacity_gen += 1
        self.wake.set()

    def forget_grants(self) -> None:
        """Tenants' or queues' limits change (under the lock): read them again when next asked."""
        self.grant_rows = {}

    def rebuild_admission(self) -> None:
        """New quota books after queues changed, re-charged from the held allocations."""
        with self.lock:
            self.admission = Admission(self.engine, self.queue_specs.values())
            for job in self.held.values():
                for alloc in job.allocations:  # the flavour may change with the queue's quotas
                    job.flavor = self.admission.restore(
                        alloc, job.queue, job.flavor, in_engine=False
                    )
            self.capacity_gen += 1
            self.wake.set()

    # ------------------------------------------------------------------ what the services see
    # The services, the scheduler loop and the agent inside ``up`` reach the live state only
    # through these: read-only views, and named operations for each change (a source test,
    # tests/unit/server/test_plane_boundary.py, keeps it so). Call them under ``lock``.
    @property
    def node_records(self) -> Mapping[str, NodeRecord]:
        """Every node the plane serves, by name; read-only (change them with the methods)."""
        return MappingProxyType(self.nodes)

    def node(self, name: str) -> NodeRecord | None:
        return self.nodes.get(name)

    def put_nodes(self, records: Mapping[str, NodeRecord]) -> None:
        """Serve ``records`` (registered or changed; stored by the caller under the same lock)."""
        self.nodes.update(records)
        self._nodes_changed += 1

    def agent_node_records(self) -> list[tuple[str, NodeRecord]]:
        """(name, record) of every node an agent registered (``source`` 'agent'), a list that
        is built again only when nodes come or go: the lost-node watch asks every few seconds,
        and walking thousands of cluster-file nodes under the lock for none of them would make
        an idle pool's cost grow with its size (issue 25)."""
        if self._agent_nodes[0] != self._nodes_changed:
            agents = [(n, r) for n, r in self.nodes.items() if r.source == "agent"]
            self._agent_nodes = (self._nodes_changed, agents)
        return list(self._agent_nodes[1])

    def set_schedulable(self, name: str, schedulable: bool) -> None:
        """Whether the engine may place on node ``name`` (ready and not cordoned)."""
        self.engine.set_node_schedulable(name, schedulable)

    @property
    def cluster_state(self) -> ClusterState:
        """The engine's columns, to read (device and node views, metrics)."""
        return self.engine.state

    @property
    def queued(self) -> Mapping[int, PendingJob]:
        """The pending jobs by id; read-only."""
        return MappingProxyType(self.pending)

    def queue_job(self, job: PendingJob) -> None:
        """``job`` waits in its queue (a submission, stored by the caller under the lock)."""
        self.pending[job.id] = job

    def queued_tally(self, tenant: str) -> tuple[int, int]:
        """(pending jobs, their replicas) of ``tenant``."""
        return self.pending.tally(tenant)

    @property
    def held_jobs(self) -> Mapping[int, HeldJob]:
        """The jobs holding devices by id; read-only."""
        return MappingProxyType(self.held)

    def hold(self, job: HeldJob) -> None:
        """``job`` holds devices now (placed by the scheduler loop, stored under the lock)."""
        self.held[job.id] = job

    # ------------------------------------------------------------------ store helpers
    @contextmanager
    def write(self) -> Iterator[Connection]:
        """One store transaction under the plane's lock; commits on success.

        A store that fails to write (disk full, read-only) raises :class:`Unavailable` (503) with
        one line, marks the server unhealthy, and puts memory back to what the store holds, so a
        failed write changes nothing. While unhealthy, writes fail at once, without touching
        anything, until :meth:`check_store` sees the store take a write again."""
        with self._waiting_count(1):
            self.lock.acquire()
        try:
            if self.health.failure is not None:
                raise Unavailable(self.health.failure)
            try:
                conn = self._writer_connection()
                with conn.begin():
                    yield conn
            except (OperationalError, OSError) as exc:
                self._drop_writer()
                raise self.store_failed(exc) from None
        finally:
            self.lock.release()

    def _writer_connection(self) -> Connection:
        """The connection :meth:`write` uses, kept between writes (under the lock, so one thread
        at a time): taking one from the pool and giving it back, which rolls back, cost about a
        tenth of what the store took per submission (issue 25). A write that failed on the
        store drops it; the next write connects again."""
        conn = self._writer
        if conn is None or conn.closed or conn.invalidated:
            conn = self._writer = self.db.connect()
        return conn

    def _drop_writer(self) -> None:
        conn, self._writer = self._writer, None
        if conn is not None:
            with suppress(Exception):  # already broken: nothing more to undo
                conn.invalidate()  # not back to the pool: the store failed under it

    @contextmanager
    def _waiting_count(self, n: int) -> Iterator[None]:
        """``writers_waiting`` is ``n`` higher while the block runs."""
        with self._waiting_guard:
            self.writers_waiting += n
        try:
            yield
        finally:
            with self._waiting_guard:
                self.writers_waiting -= n
                if not self.writers_waiting:
                    self._waiting_guard.notify_all()

    def wait_for_writers(self, timeout_s: float) -> bool:
        """Block (``timeout_s`` at most) until no thread waits in :meth:`write` for the lock;
        whether none does. One sleep until the last one is in, not a poll: a poll woke the
        waiting thread every 0.1 ms, and each wake took the GIL from the threads it waited for."""
        with self._waiting_guard:
            return self._waiting_guard.wait_for(lambda: not self.writers_waiting, timeout_s)

    @contextmanager
    def file_writes(self) -> Iterator[None]:
        """Writes to files beside the store (where a run's output starts in its logs), as
        :meth:`write` for the store: one that fails marks the server unhealthy (logged once) and
        raises :class:`Unavailable`; while unhealthy they fail at once. They change no memory, so
        nothing is reloaded. Job output itself is not written here: ``job_logs.py`` drops what
        the disk cannot take instead."""
        if self.health.failure is not None:
            raise Unavailable(self.health.failure)
        try:
            yield
        except OSError as exc:
            reason = store_failure(exc)
            self.health.fail(reason)
            raise Unavailable(reason) from None

    def store_failed(self, exc: BaseException) -> Unavailable:
        """Record a failed write (logged once) and undo what memory did ahead of the store;
        returns the error to raise."""
        reason = store_failure(exc)
        self.health.fail(reason)
        with self.lock:
            try:
                self.reload()
            except Exception as again:  # the store cannot even be read: reload on recovery
                self._stale = True
                log.error("reloading from the store failed too: %s", store_failure(again))
        return Unavailable(reason)

    def check_store(self) -> bool:
        """While unhealthy: try one write that changes nothing else; on success clear the
        failure (reloading first if memory may be stale) and give every node a fresh heartbeat
        grace (their heartbeats were refused meanwhile). Returns whether the store is healthy."""
        if self.health.failure is None:
            return True
        with self.lock:
            try:
                with self.db.begin() as conn:
                    conn.execute(update(t_pool).values(opened_at=self.clock()))
                probe_writable(self.data_dir)
                probe_writable(self.logs.dir)  # a run handed out writes its log's first line
                if self._stale:
                    self.reload()
            except (OperationalError, OSError) as exc:
                self.health.fail(store_failure(exc))
                return False
            now = self.monotonic()
            for rec in self.nodes.values():
                if rec.heard_at is not None:
                    rec.heard_at = now
            self.health.recover()
            self.bump()
            return True

    def apply(
        self,
        conn: Connection,
        job_id: int,
        event: lc.Event,
        writes: JobWrites | None = None,
        **values: object,
    ) -> lc.Outcome:
        """Move job ``job_id`` as :func:`~xpupool.server.job_lifecycle.transition` says for
        ``event``: the new phase, cause and reason and one event row are written in ``conn``'s
        transaction first, then memory follows (held and pending jobs, devices released, the
        job requeued). ``values`` are further columns to store with it (the flavour of a
        placement). Raises :class:`~xpupool.server.job_lifecycle.IllegalTransition` (409)
        before anything is written. With ``writes`` the row and the event are kept there, to be
        written with the transaction's other job writes (``storage/job_writes.py``); what is
        kept is written first wherever this reads or writes anything else."""
        held = self.held.get(job_id)
        if writes is not None and held is None and job_id not in self.pending:
            writes.flush(conn)  # the status is read from the store
        status = self._status(conn, job_id, held, event)
        out = lc.transition(status, event)
        if not out.changed:
            return out
        now = self.clock()
        cols: dict[str, object] = {**values, "updated_at": now}
        if out.sets_reason:
            cols.update(state=out.phase.value, reason=out.job_reason)
            cols["stop_cause"] = None if out.stop is None else out.stop.value
        if out.exit_code is not None:
            cols["exit_code"] = out.exit_code
        if out.attempt is not None:
            cols["attempts"] = out.attempt
        if isinstance(event, lc.Admit):
            cols["not_before"] = None  # a retry's wait is over once it is admitted
        if isinstance(event, lc.Start) or (
            isinstance(event, lc.Dispatch)
            and status is not None
            and status.phase is JobPhase.RUNNING
        ):
            cols["started_at"] = now  # a run again after a restart has no Start: it ran before
        if out.requeue and status is not None:
            cols["retries"] = status.retries + int(out.retried)
            cols["not_before"] = now + out.backoff_s if out.backoff_s > 0 else None
            cols["started_at"] = None
        event_row = {"job_id": job_id, "at": now, "state": out.phase.value, "reason": out.reason}
        if writes is None:
            update_rows(conn, job_update(tuple(sorted(cols))), [job_update_params(job_id, cols)])
            insert_rows(conn, t_events, [event_row])
        else:
            writes.update(job_id, cols)
            writes.event(event_row)
            if out.release or out.requeue:
                writes.flush(conn)  # both go on to read or write the store
        if held is not None:
            if out.phase in HOLDING_STATES:
                held.state = out.phase
            held.stop = out.stop
            held.stop_reason = out.stop_reason if out.stop else ""
            if out.attempt is not None or isinstance(event, lc.Adopt):
                held.attempt, held.dispatched = out.attempt or held.attempt, True
            if cols.get("started_at") is not None:
                held.started_at = now
            if out.release:
                self.release_job(conn, held)
        elif out.phase is not JobPhase.PENDING:
            self.pending.pop(job_id, None)
        if out.requeue:  # read back: the row as stored now (its retry's not_before)
            row = conn.execute(select(t_jobs).where(t_jobs.c.id == job_id)).mappings().one()
            self.pending[job_id] = pending_from_row(row)
        return out

    def _status(
        self, conn: Connection, job_id: int, held: HeldJob | None, event: lc.Event
    ) -> lc.JobStatus | None:
        """The job as the transition sees it (None: not stored). A placement or a start needs
        only memory; a stop or an end reads the job's retry policy from the store."""
        if held is not None:
            phase: JobPhase = held.state
        elif job_id in self.pending:
            phase = JobPhase.PENDING
        else:
            stored = conn.execute(select(t_jobs.c.state).where(t_jobs.c.id == job_id)).scalar()
            if stored is None:
                return None
            phase = JobPhase(stored)
        stop, stop_reason = (held.stop, held.stop_reason) if held else (None, "")
        may_run = held.may_run if held else False
        if not isinstance(event, (lc.Stop, lc.Ended, lc.Lost, lc.LeaseExpired)):
            return lc.JobStatus(phase, stop, stop_reason, may_run)
        row = conn.execute(select(t_jobs).where(t_jobs.c.id == job_id)).mappings().one()
        return lc.JobStatus(
            phase, stop, stop_reason, may_run, int(row["retries"] or 0), lc.retry_policy(row)
        )

    def release_job(self, conn: Connection, job: HeldJob) -> None:
        """Give back every allocation of ``job`` (engine, quota and store)."""
        for alloc in job.allocations:
            self.admission.release(alloc.id)
        conn.execute(delete(t_allocs).where(t_allocs.c.job_id == job.id))
        nodes = {a.node for a in job.allocations}
        job.allocations = []
        self.held.pop(job.id, None)
        self.advance_drains(conn, nodes)
        self.bump()

    def advance_drains(self, conn: Connection, names: Iterable[str]) -> None:
        """Apply what draining nodes among ``names`` wait for, as far as the allocations still
        on them allow: a device whose last allocation ended is dropped or changed now (what a
        registration's drain registered), a node the admin deletes is removed once nothing is
        held there (a deletion's drain)."""
        changed = []
        for name in names:
            rec = self.nodes.get(name)
            if rec is None or (rec.target is None and rec.deleting_since is None):
                continue
            on_node = [
                (j.id, a) for j in self.held.values() for a in j.allocations if a.node == name
            ]
            if rec.deleting_since is not None and not on_node:
                revoked = self.remove_node(conn, name)
                self.forget_node(name)
                self.audit.record(
                    None,
                    "delete_node",
                    f"node {name}",
                    200,
                    f"ok: drained and removed (deletion asked at {rec.deleting_since:.0f}); "
                    f"tokens revoked: {revoked or 'none'}",
                    conn,
                )
                log.warning("node %s: its last allocation ended, node deleted", name)
                changed.append(name)
                continue
            if rec.target is None:
                continue
            step = plan(rec.node, rec.target, on_node)
            if step.serve == rec.node:
                continue
            rec.node, rec.target = step.serve, step.target
            conn.execute(update(t_nodes).where(t_nodes.c.name == name).values(**node_values(rec)))
            changed.append(name)
            log.info("node %s: drained devices applied (%d left to drain)", name, len(rec.draining))
        if changed:
            self.rebuild_engine(conn)

    def remove_node(self, conn: Connection, name: str) -> list[int]:
        """The store's half of deleting node ``name``, in ``conn``'s transaction: its row goes
        and every live credential bound to it (agent tokens, a bootstrap token pinned to its
        name) is revoked; returns the revoked token ids. Nothing may be held on the node: the
        caller checked, and rebuilds the engine after :meth:`forget_node`."""
        bound = select(t_tokens.c.id).where(
            t_tokens.c.node == name,
            t_tokens.c.role.in_(sorted(AGENT_ROLES)),
            t_tokens.c.revoked.is_(False),
        )
        revoked = [int(i) for i in conn.execute(bound).scalars()]
        if revoked:
            conn.execute(update(t_tokens).where(t_tokens.c.id.in_(revoked)).values(revoked=True))
        conn.execute(delete(t_nodes).where(t_nodes.c.name == name))
        return revoked

    def forget_node(self, name: str) -> None:
        """Memory's half of deleting node ``name``: its record and its devices' metrics go,
        cached principals are dropped (their tokens may be revoked now), and the in-process
        agent speaks for it no more. The engine still has it until the caller rebuilds it."""
        rec = self.nodes.pop(name)
        self._nodes_changed += 1
        for n in (rec.node, rec.target):
            for d in n.devices if n is not None else ():
                self.metrics.pop(d.uuid, None)
        self.principals.clear()
        self.released_nodes.add(name)

    def cordon_node(self, conn: Connection, name: str, cordoned: bool) -> None:
        """Cordon (or uncordon) a node in memory, engine and store; what runs there stays.
        Uncordoning a node that waits to be deleted cancels the deletion."""
        rec = self.nodes[name]
        rec.cordoned = cordoned
        values: dict[str, object] = {"schedulable": not cordoned}
        if not cordoned and rec.deleting_since is not None:
            rec.deleting_since = None
            values["deleting_since"] = None
            log.warning("node %s uncordoned: its deletion is cancelled", name)
        conn.execute(update(t_nodes).where(t_nodes.c.name == name).values(**values))
        self.engine.set_node_schedulable(name, not cordoned and rec.status is NodeStatus.READY)
        if not cordoned:
            self.bump()

    def cordon_device(self, conn: Connection, rec: NodeRecord, uuid: str, cordoned: bool) -> None:
        """Cordon (or uncordon) one device of ``rec``; a draining device stays cordoned."""
        (rec.cordoned_devices.add if cordoned else rec.cordoned_devices.discard)(uuid)
        conn.execute(
            update(t_nodes)
            .where(t_nodes.c.name == rec.node.name)
            .values(cordoned_devices=sorted(rec.cordoned_devices))
        )
        self.engine.set_device_cordoned(uuid, cordoned or uuid in rec.draining)
        if not cordoned:
            self.bump()

    def runs_past_limit(self) -> list[tuple[int, float]]:
        """(job, its max_runtime_s) of every run that has lasted longer than its limit and is
        not being stopped yet."""
        now = self.clock()
        with self.lock:
            return [
                (j.id, j.max_runtime_s)
                for j in self.held.values()
                if j.max_runtime_s is not None
                and j.started_at is not None
                and j.stop is None
                and now - j.started_at > j.max_runtime_s
            ]

    def forget_jobs(self, conn: Connection, job_ids: list[int]) -> None:
        """Delete finished jobs ``job_ids`` (rows and events) in ``conn``'s transaction; the
        pool's first job id moves above every id handed out, so that no id (nor its log
        directory) is ever handed out again, even when the newest jobs are the ones deleted."""
        assert not any(i in self.held or i in self.pending for i in job_ids), "not finished"
        conn.execute(delete(t_events).where(t_events.c.job_id.in_(job_ids)))
        conn.execute(delete(t_jobs).where(t_jobs.c.id.in_(job_ids)))
        conn.execute(
            update(t_pool)
            .where(t_pool.c.first_job_id < self.next_job_id)
            .values(first_job_id=self.next_job_id)
        )

    def log_path(self, job_id: int, replica: int) -> Path:
        return self.logs.path(job_id, replica)

    def notify(self, event: str, seconds: float) -> None:
        for observer in self.observers:
            observer(event, seconds)


# ---------------------------------------------------------------------------- row conversions
def device_from_dict(d: dict[str, object]) -> Device:
    return DeviceIn.model_validate(d).to_device()


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
    return DeviceIn.from_device(d).model_dump()


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
        max_runtime_s=r.get("max_runtime_s"),
    )


def pending_from_row(row: object) -> PendingJob:
    r = dict(row)  # type: ignore[call-overload]
    # not in the stored request form: an image job needs a node with a container runtime
    req = replace(request_from_dict(r["request"]), container=r["image"] is not None)
    job = PendingJob(
        r["id"], r["tenant"], r["queue"], r["priority"], gang_request(req), r["created_at"]
    )
    job.not_before = float(r.get("not_before") or 0.0)
    job.max_runtime_s = r.get("max_runtime_s")
    job.attempts = int(r.get("attempts") or 0)
    return job


def gang_request(req: Request) -> Request:
    """The server admits a job's replicas together (Kueue admits a workload as a whole)."""
    return req if req.gang or req.replicas == 1 else replace(req, gang=True)


def tenant_weights(conn: Connection) -> dict[str, float]:
    return {r.name: r.weight for r in conn.execute(select(t_tenants))}


def check_request_names(engine: Engine, req: Request, field: str = "request.node_policy") -> None:
    """Fail early on a policy name the engine does not know (``field`` names where it came from)."""
    if req.node_policy and req.node_policy not in engine.profiles:
        raise RequestError(
            field, req.node_policy, f"unknown policy; known: {', '.join(sorted(engine.profiles))}"
        )
