"""The plane's books, row by row: what it knows of a node, a pending job, a held job.

A :class:`NodeRecord` is changed only by the plane's node methods, which ask the node lifecycle
(``node_lifecycle.py``) what follows; a :class:`HeldJob`'s phase and stop only by
``ControlPlane.apply``, which asks the job lifecycle (``server/job_lifecycle.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from dataclasses import fields as dataclass_fields

from xpupool.catalog.throughput import CardSpeed
from xpupool.engine.cycle.admission import Admission
from xpupool.engine.cycle.work import Stopping
from xpupool.engine.engine import Engine
from xpupool.engine.gang_sites import within_sites
from xpupool.model.allocation import Allocation
from xpupool.model.device import Node
from xpupool.model.request import Request
from xpupool.model.stopping import IdleStop
from xpupool.server import job_lifecycle as lc
from xpupool.server.consistency import Problem
from xpupool.server.drain import draining
from xpupool.server.plane.foreign_use import ForeignUse
from xpupool.server.plane.node_lifecycle import NodeLife
from xpupool.server.schemas.agent_protocol import FINAL_REPLICA_STATES, ReplicaState
from xpupool.server.schemas.jobs import JobPhase, StopCause
from xpupool.server.schemas.nodes import NodeStatus


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
    def life(self) -> NodeLife:
        """Its state as the node lifecycle sees it (``node_lifecycle.py``)."""
        lost = self.status is NodeStatus.LOST
        return NodeLife(lost, self.cordoned, self.target is not None, self.deleting_since)

    def live(self, life: NodeLife) -> None:
        """Take the state the node lifecycle says follows (the plane's node methods only; the
        drain itself is the inventory in ``target``, set with it)."""
        self.status = NodeStatus.LOST if life.lost else NodeStatus.READY
        self.cordoned, self.deleting_since = life.cordoned, life.deleting_since

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
    reservation: str | None = None  # the reservation it runs in (engine/cycle/reservations.py)
    preemptible: bool = False  # it may borrow cards reserved for others until their window
    attempts: int = 0  # runs started before (a retry's, held with the job once placed)
    # the site the plane dispatched it to (issue 51; stored as the job's ``site``): ``request``
    # is then ``asked`` kept to that site; None: not dispatched, ``request`` is ``asked``
    site: str | None = None
    asked: Request = field(init=False)  # the request as the user gave it: the sites it allowed

    def __post_init__(self) -> None:
        self.asked = self.request

    def keep_to(self, site: str | None) -> None:
        """Dispatch it to ``site`` (None: undo a dispatch, its request as asked again). Through
        ``PendingJobs.dispatch`` while it is queued, which counts it per site."""
        self.site = site
        self.request = self.asked if site is None else within_sites(self.asked, (site,))

    # the speeds the plane gave it from what it measured of its kind (server/throughput_knowledge
    # .py), also in ``request.speeds``; (): none given (it declares its own, or none are known)
    known_speeds: tuple[CardSpeed, ...] = ()
    # (elastic job, replica) stopped for it (server/plane/elastic_runs.py): it is not decided
    # again until they are gone
    shrinks: set[tuple[int, int]] = field(default_factory=set)


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
    reservation: str | None = None  # the reservation it runs in (PendingJob's)
    preemptible: bool = False
    min_run_s: float | None = None  # not preempted before its run lasted this (its request's)
    checkpoint_at: float | None = None  # Unix time of its last checkpoint reported in this run
    idle_stop: IdleStop | None = None  # its request's idle_stop (server/idle_runs.py)
    idle_since: float | None = None  # since when its cards have all read idle (memory only)
    handed: set[int] = field(default_factory=set)  # replicas handed to an agent: may be running
    dispatched: bool = False  # this server handed its current run out (counted in ``attempt``)
    # {replica: {uuid: MiB}}: the agent's last per-process measurement of a running replica;
    # absent when not measured; gone with the job when it is released (metrics only, not stored)
    device_memory_used_mib: dict[int, dict[str, int]] = field(default_factory=dict)
    limits: dict[int, str] = field(default_factory=dict)  # {replica: enforcement, recorded}
    ports: dict[int, list[int]] = field(default_factory=dict)  # {replica: its agent's ports}
    failures: dict[int, str] = field(default_factory=dict)  # {replica: the agent's reason}
    # {replica: (attempt, step, the plane's clock)}: the last start step recorded in its events
    # (an image's pull)
    steps: dict[int, tuple[int | None, str, float]] = field(default_factory=dict)
    kind: str | None = None  # its job type (its request's): what its progress reports teach
    progressed: set[int] = field(default_factory=set)  # replicas that reported a rate this run
    # {replica: (attempt, node, shares, pod)}: replicas bound to cards a sibling holds in the
    # books, re-addressed together once it moves too (server/plane/bound_cards.py; not stored)
    bound_apart: dict[int, tuple[int, str, tuple[tuple[str, int, int], ...], str]] = field(
        default_factory=dict
    )
    # its request when it is elastic (``replicas=MIN..MAX``): what it grows by; None: fixed size
    elastic: Request | None = None
    # {replica: pending job}: its extra replicas being stopped for that job (a shrink,
    # server/plane/elastic_runs.py); their cards are freed when the agent reports them gone
    shrinking: dict[int, int] = field(default_factory=dict)
    # its request when it may be moved to defragment (it declares a checkpoint signal and a
    # preemption requeues it): what it is placed again with; None: never moved
    # (server/plane/defrag_moves.py)
    movable: Request | None = None

    @property
    def may_run(self) -> bool:
        """True once an agent may have started a process: stopping must then wait for it."""
        return self.state is JobPhase.RUNNING or bool(self.handed)

    @property
    def stopping(self) -> Stopping | None:
        """The stop as the scheduling cycle reads it (``RunningWork``): ``PREEMPT`` for a victim
        of an earlier decision, ``OTHER`` for any other stop, None when not stopping."""
        if self.stop is None:
            return None
        return Stopping.PREEMPT if self.stop is StopCause.PREEMPTED else Stopping.OTHER


@dataclass(frozen=True, slots=True)
class RunView:
    """A held job's run as one read of the plane saw it (``PlaneReads.held_run``): a copy, for
    code outside the plane that acts on it afterwards (a Kubernetes site's worker), so that it
    never holds the plane's lock while it talks to a cluster."""

    job: int
    tenant: str
    state: JobPhase
    attempt: int
    stopping: bool
    allocations: tuple[tuple[int, str], ...]  # (replica, node) of each allocation
    final: frozenset[int]  # replicas whose last report is final
    running: frozenset[int] = frozenset()  # replicas whose last report is running

    @classmethod
    def of(cls, job: HeldJob) -> RunView:
        return cls(
            job.id,
            job.tenant,
            job.state,
            job.attempt,
            job.stop is not None,
            tuple((a.replica, a.node) for a in job.allocations),
            frozenset(r for r, st in job.replica_states.items() if st in FINAL_REPLICA_STATES),
            frozenset(r for r, st in job.replica_states.items() if st is ReplicaState.RUNNING),
        )

    def node_of(self, replica: int) -> str | None:
        """The node replica ``replica`` was placed on; None: no such replica."""
        return next((node for r, node in self.allocations if r == replica), None)

    def unfinished(self) -> list[tuple[str, int]]:
        """(node, replica) of each replica whose last report is not final."""
        return [(node, r) for r, node in self.allocations if r not in self.final]


@dataclass
class Built:
    """An engine made by :meth:`ControlPlane.build`, not yet served: the allocations it holds per
    held job, and those it could not re-apply."""

    engine: Engine
    admission: Admission
    allocations: dict[int, list[Allocation]]
    problems: list[Problem]
    foreign: ForeignUse = field(default_factory=ForeignUse)
    """The sites' foreign use applied, and what waits (``foreign_use.py``)."""


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
        "reservation",
        "preemptible",
        "elastic",
    }
)
STOPPING = lc.STOPPING  # how a stored reason starts while the job's replicas are stopped


def carry_transients(before: HeldJob, after: HeldJob) -> None:
    """Copy what the store does not keep (replica states, stop requests, measurements)."""
    for f in dataclass_fields(HeldJob):
        if f.name not in _STORED_HELD:
            setattr(after, f.name, getattr(before, f.name))
