"""The control plane's live state: one engine, one admission book, the store, and one lock.

Decide (engine), then persist (store), then act (agents). Every change takes the lock, changes the
engine, and writes the store in one transaction before the lock is let go; if the write fails the
engine change is undone. On start the engine is rebuilt from the store alone (nodes, then the
allocation rows), so what a crash leaves behind is exactly what was committed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from types import MappingProxyType
from typing import Any

from sqlalchemy import Connection, event
from sqlalchemy.exc import DBAPIError, OperationalError

from xpupool.catalog.images import ImageCatalog, default_image_catalog
from xpupool.catalog.power import PowerModel
from xpupool.disk_reserve import DEFAULT_LOG_RESERVE_BYTES
from xpupool.engine.cycle.admission import Admission, QueueSpec
from xpupool.engine.cycle.cycle import SchedulingCycle
from xpupool.engine.cycle.defrag import Defrag
from xpupool.engine.cycle.dispatch import SiteDispatch
from xpupool.engine.cycle.fair_share import DecayedUsage
from xpupool.engine.cycle.retry_gate import RetryGate
from xpupool.engine.cycle.stop_cost import StopCost
from xpupool.engine.engine import Engine
from xpupool.engine.host import EngineHost
from xpupool.engine.learning_pace import LearningPace
from xpupool.engine.profile import BUILTIN_PROFILES, DEFAULT_PROFILE, Profile, known_profile
from xpupool.engine.state import ClusterState
from xpupool.engine.verdict import Verdicts
from xpupool.model.allocation import Allocation
from xpupool.model.errors import Conflict, RequestError, Unavailable
from xpupool.model.request import Request
from xpupool.model.site_network import SiteNetwork
from xpupool.model.stopping import MAX_GRACE_S
from xpupool.server import job_lifecycle as lc
from xpupool.server.audit import AuditKeep, AuditLog
from xpupool.server.auth import Principal
from xpupool.server.card_health import CardHealth
from xpupool.server.consistency import Problem, problem_for
from xpupool.server.health import Health, probe_writable, store_failure
from xpupool.server.idle_runs import idle_runs
from xpupool.server.job_checkpoints import record_checkpoint, stop_cost_of
from xpupool.server.job_logs import JobLogs
from xpupool.server.lease import Lease
from xpupool.server.live_metrics import LiveMetrics
from xpupool.server.ownership import StoreFenced, StoreOwnership
from xpupool.server.pending_jobs import PendingJobs
from xpupool.server.plane import foreign_use, learned_runs, reservation_book, secret_rows, store
from xpupool.server.plane.card_idle import CardIdle
from xpupool.server.plane.faster_targets import PlaneConsolidation, PlaneFaster
from xpupool.server.plane.lock import PlaneLock
from xpupool.server.plane.nodes import NodeBook
from xpupool.server.plane.reads import PlaneReads
from xpupool.server.plane.records import (
    Built,
    HeldJob,
    NodeRecord,
    PendingJob,
    RunView,
    carry_transients,
)
from xpupool.server.plane.recut_backoff import RecutBackoff
from xpupool.server.plane.registration import NodeRegistration
from xpupool.server.plane.store import (
    pending_from_row,
)
from xpupool.server.plane.tenancy import TenancyBooks
from xpupool.server.plane.tenant_store import TenantStore
from xpupool.server.power_saving import PowerSaving
from xpupool.server.retention import Retention
from xpupool.server.schemas.agent_protocol import DeviceMetrics, VolumeUsageReport
from xpupool.server.schemas.jobs import HOLDING_STATES, JobPhase, StopCause
from xpupool.server.secret_box import SecretBox, key_id
from xpupool.server.service_endpoints import NO_ENDPOINTS, Endpoints
from xpupool.server.service_traffic import ProxyTraffic
from xpupool.server.sites.agent_pool import AgentPoolSite
from xpupool.server.sites.protocol import Sites
from xpupool.server.storage import meta
from xpupool.server.storage.driver_insert import STATEMENT_WATCH
from xpupool.server.storage.job_writes import JobWrites
from xpupool.server.storage.tenants import assign_tenant_indices
from xpupool.server.throughput_knowledge import Progressed, ThroughputKnowledge
from xpupool.server.usage import fair_share_seed
from xpupool.server.usage.billing import Billing
from xpupool.server.usage.meter import UsageMeter
from xpupool.server.wake import Wake

log = logging.getLogger("xpupool.server")
DEFAULT_MAX_LOG_BYTES = 64 << 20
DEFAULT_HISTORY_INTERVAL_S = 60.0  # seconds between two fleet history samples
SEED_JOBS = 2000  # the last jobs a restarted engine learns its workload from (_seed_learning)


class ControlPlane(NodeBook, NodeRegistration, TenancyBooks, TenantStore, PlaneReads):
    """Everything the API and the agents act on. Thread-safe through its one lock: reach the
    books under :meth:`locked` or :meth:`write`."""

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
        sites: Sites | None = None,
        secret_key_file: Path | None = None,
        model_cache: str | None = None,
    ) -> None:
        self.data_dir = data_dir
        # the volume model jobs mount at their runtime's cache path (services/model_cache.py;
        # ``xpupool up --model-cache``); None: none
        self.model_cache = model_cache
        # the site choice's books (engine/cycle/dispatch.py): the links between node sites and
        # where named datasets live (``site_network``: ``xpupool up --sites FILE``,
        # model/site_network.py; a job's ``data`` names one of these), the run times learned
        self.site_dispatch = SiteDispatch()
        # where the nodes live and work runs (server/sites/): ``xpupool up`` hands them in; by
        # default the agent pool alone, as every plane had before sites
        self.sites = sites if sites is not None else Sites([AgentPoolSite()])
        # what a job's image implies (catalog/images.py): an operator's rules before the built-in
        self.image_catalog = image_catalog or default_image_catalog()
        # the replicas' logs (server/job_logs.py): DATA/logs, or under ``xpupool up --logs``;
        # ``max_log_bytes``: what the server keeps of one replica's log (--log-cap)
        self.logs = JobLogs(logs_dir or data_dir / "logs", max_log_bytes, log_reserve_bytes)
        # the schema is made once per process: by the store owner's claim when there is one
        self.db = meta.connect(db_url, schema=ownership is None or not ownership.made_schema)
        # tenants' secrets are sealed under this key (secret_box.py; --secret-key-file)
        self.secret_box = SecretBox(secret_key_file or data_dir / "secret.key")
        self.secret_box.recover(lambda: secret_rows.key_ids(self))
        self.seed = seed
        self.profile = profile
        # the built-in profiles and those of the --profile file: what jobs and queues may name
        self.profiles: dict[str, Profile] = {**BUILTIN_PROFILES, **(profiles or {})}
        known_profile(self.profiles, profile, "--policy")
        self.heartbeat_s = heartbeat_s
        self.lost_after_s = lost_after_s
        self.lease = Lease.for_settings(heartbeat_s, lost_after_s, lease_s)
        self.clock = clock  # Unix time: what is stored and shown
        # what durations are timed with (node liveness, the lease of a silent node's replicas):
        # a step of the wall clock moves ``clock``, never this
        self.monotonic = monotonic
        self._lock = PlaneLock()  # the one lock (lock.py): take it with locked() or write()
        # while the lock's holder waits on a store that does not answer, a new connection (a
        # read's) is refused at once, not after TCP gives up (plane/store_stall.py); what counts
        # is the time the holder spends in a statement or a commit, not in its own Python
        event.listen(self.db, "checkout", lambda *_: self._lock.stall.refuse())
        event.listen(self.db, "do_connect", lambda *_: self._lock.stall.refuse())
        event.listen(self.db, "before_cursor_execute", self._statement_sent)
        event.listen(self.db, "after_cursor_execute", self._statement_answered)
        event.listen(self.db, "handle_error", self._statement_answered)
        self.wake = Wake()  # the scheduling loop's (scheduler_loop.run_passes)
        self.learning_pace = LearningPace()  # when the scheduling loop re-learns (its _relearn)
        # which pending jobs a pass tries (engine/cycle/retry_gate.py): its capacity generation
        # moves whenever something is released, added, uncordoned or re-quoted
        self.retry_gate = RetryGate()
        self.next_job_id = 1
        # the engine over the pool (engine/host.py): it builds each engine from the node records
        # and owns the pool's one allocation id counter, raised to the stored mark on each read
        # (storage/pool.py), so no id repeats after a registration, a rebuild or a restart (issue
        # 43, item 3); learning is deferred: the scheduling pass re-learns after placing
        self.host = EngineHost(profile, profiles=self.profiles, seed=seed, defer_learning=True)
        self._principals: dict[str, Principal] = {}  # token hash -> principal, live tokens only
        self.audit = AuditLog(self.db, self.write, clock, audit_keep)  # rows kept per kind
        self.retention = retention or Retention()  # finished jobs kept (services/job_limits.py)
        if not history_interval_s > 0:
            raise RequestError("--history-interval", history_interval_s, "must be above 0 s")
        self.history_interval_s = history_interval_s  # fleet samples kept (server/history.py)
        self._nodes: dict[str, NodeRecord] = {}
        self._nodes_changed = 0  # counts changes of ``nodes`` (the agent-node list's key)
        self._agent_nodes: tuple[int, list[tuple[str, NodeRecord]]] = (-1, [])
        # nodes the admin deleted or took over while this server runs: the in-process agent,
        # which has no token to revoke, speaks for them no more (services/node_identity.py)
        self._released_nodes: set[str] = set()
        self._metrics: dict[str, DeviceMetrics] = {}
        self.live = LiveMetrics()  # the same readings as columns, and a ring per card
        self.card_health = CardHealth()  # cards read unhealthy: cordoned, emptied, settling
        self.meter = UsageMeter()  # what each replica run used (server/usage/meter.py)
        self.card_idle = CardIdle(clock())  # since when each card held nothing (card_idle.py)
        self.recut_backoff = RecutBackoff()  # cards whose re-cuts failed (recut_backoff.py)
        # online defragmentation (``xpupool up --defrag``; plane/defrag_moves.py): None: off
        self.defrag: Defrag | None = None
        # moves to faster cards (``xpupool up --move-faster``; plane/faster_moves.py): None: off
        self.faster: PlaneFaster | None = None
        # consolidation in quiet periods (``up --consolidate``; plane/consolidation_moves.py)
        self.consolidation: PlaneConsolidation | None = None
        self.max_grace_s = MAX_GRACE_S  # the longest grace= a job may ask (up --max-grace)
        self.billing = Billing()  # prices, budgets and spend (server/usage/billing.py)
        # the admission order's usage over a decaying window (engine/cycle/fair_share.py);
        # None: DRF on what is held now (xpupool up --fair-share)
        self.fair_share: DecayedUsage | None = None
        self.throughput = ThroughputKnowledge()  # measured speeds (server/throughput_knowledge.py)
        self.power_saving = PowerSaving()  # cards that could sleep, nodes idle (power_saving.py)
        # services (issue 47): the ready replicas of each service (service_endpoints.py), which
        # the proxy reads: the service controller's once it runs (service_controller.py), none
        # before; what wakes the controller; what the proxy counts (service_traffic.py), which
        # the controller scales on
        self.service_endpoints: Endpoints = NO_ENDPOINTS
        self.services_wake = Wake()
        self.service_traffic = ProxyTraffic(monotonic)
        # node -> (when, what its volumes held): the last measure each agent sent (not stored)
        self.volume_usage: dict[str, tuple[float, list[VolumeUsageReport]]] = {}
        self._pending: PendingJobs[PendingJob] = PendingJobs()  # counts per tenant (limits)
        self._held: dict[int, HeldJob] = {}
        # the ids of held elastic jobs: every pass asks whether any can grow, and most pools
        # hold none among thousands (elastic_runs.py; docs/benchmarks.md, "Submissions through the API")
        self._elastic: dict[int, None] = {}  # in the order _held has them
        # what the sites' nodes hold for work that is no job of the plane's (foreign_use.py)
        self.foreign_use = foreign_use.ForeignUse()
        self._queue_specs: dict[str, QueueSpec] = {}
        self._queue_profiles: dict[str, str] = {}  # queue -> profile of its jobs that name none
        # queue -> its and its tenant's limits as stored (services/grants.py), read once per
        # queue: every write to tenants or queues empties it (forget_grants)
        self._grant_rows: dict[str, Any] = {}
        self._writer: Connection | None = None  # the connection of write(), held (see there)
        self.admission: Admission
        self._cycle: SchedulingCycle | None = None
        self.reservations = reservation_book.book(self)  # read with the books (_read)
        self.observers: list[Callable[[str, float], None]] = []  # (event, seconds) for metrics
        self.health = Health()
        self.ownership = ownership  # None: this plane writes unfenced (tests, tools)
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
            self._tenant_index: dict[str, int] = assign_tenant_indices(conn)
        self._load()
        with self.db.connect() as conn:  # what each tenant's kept logs take (job_logs.py)
            self.logs.load(store.job_tenants(conn))
            self.throughput.load(conn)
        self._check_secret_key()

    def _check_secret_key(self) -> None:
        """Say on ``/healthz`` when the key file cannot open the stored secrets: a plane
        started on another host's store with its own key (a standby given another
        ``--secret-key-file`` than the plane it took over from). It serves all the same; a job
        given a secret would not start until the right key is given."""
        stored = secret_rows.key_ids(self)
        if not stored:
            return
        held = key_id(self.secret_box.key())
        if held not in stored:
            self.health.note(
                f"tenants' secrets are sealed under key {', '.join(sorted(stored))} and "
                f"{self.secret_box.path} holds key {held}: they cannot be opened; give this "
                "plane the --secret-key-file of the plane that sealed them"
            )

    # ------------------------------------------------------------------ loading and rebuilding
    def _load(self) -> None:
        self._read()
        self.rebuild_engine()
        self._seed_learning()
        self._relearn_runs()
        if self._node_notes:  # node rows set aside by the read: cordoned and reported
            with self.db.begin() as conn:
                for name, text in self._node_notes:
                    if name in self._nodes and not self._nodes[name].cordoned:
                        self.cordon_node(conn, name, True)
                    self.health.note(f"store inconsistent: {text}")
        self._node_notes = []

    def _seed_learning(self) -> None:
        """A restarted server's engine learns its workload from the last jobs submitted, as the
        engine before the restart had, instead of from nothing: a cold engine rebuilds the
        measure over every node many times in its first requests (docs/benchmarks.md)."""
        with self.db.begin() as conn:
            requests = store.last_requests(conn, SEED_JOBS)
        self.engine.seed_learning(requests)

    def _relearn_runs(self) -> None:
        """A restarted plane's site choice and moves to faster cards weigh the run time of each
        shape the plane before it learned, read back from the jobs that succeeded
        (``learned_runs.py``), instead of knowing no run of any shape until its jobs end again."""
        with self.db.connect() as conn:
            learned_runs.relearn(conn, self.site_dispatch.runtimes)

    def _read(self) -> None:
        """Nodes, queues, held and pending jobs from the store into the (empty) books."""
        with self.db.connect() as conn:
            books = store.read_books(conn, self.monotonic)
            self.host.ids.seen(books.first_allocation_id - 1)  # every id below is used
        self._node_notes = books.notes
        self._nodes.update(books.nodes)
        self._queue_specs.update(books.queue_specs)
        self._queue_profiles.update(books.queue_profiles)
        self._held.update(books.held)
        self._elastic = {j.id: None for j in books.held.values() if j.elastic is not None}
        self._unreadable = books.unreadable
        self.next_job_id = books.next_job_id
        for job in books.pending:
            self._pending[job.id] = job
        self._nodes_changed += 1
        self.sites.adopt(self._held.values(), self._nodes)
        reserved = reservation_book.book(self)
        with self.db.connect() as conn:
            reservation_book.load(conn, reserved)
            self.recut_backoff.load(conn)  # cards resting after failed re-cuts
        self.reservations = reserved

    def reload(self) -> None:
        """Memory back to what the store holds, after a write that failed part-way (the store
        rolled back; memory may have moved ahead). What the store does not keep (replica
        states, stop requests, heartbeat times) is carried over for jobs and nodes still there.
        Takes the plane's lock: no reader sees the books half reloaded."""
        with self._lock:
            self._reload()

    def _reload(self) -> None:
        old_nodes, old_held, old_pending = self._nodes, self._held, self._pending
        old_elastic = self._elastic
        old_specs, old_next = self._queue_specs, self.next_job_id
        old_profiles = self._queue_profiles
        self._nodes, self._held, self._queue_specs, self._queue_profiles = {}, {}, {}, {}
        self.forget_grants()
        self._pending = PendingJobs()
        try:
            self._read()
            measured = ThroughputKnowledge()  # the figures too: a failed write may have moved them
            with self.db.connect() as conn:
                measured.load(conn)
        except Exception:
            self._nodes, self._held, self._pending = old_nodes, old_held, old_pending
            self._elastic = old_elastic
            self._queue_specs, self.next_job_id = old_specs, old_next
            self._queue_profiles = old_profiles
            raise
        self.throughput = measured
        for name, rec in self._nodes.items():
            was = old_nodes.get(name)
            if was is not None and rec.heard_at is not None:
                rec.last_heartbeat, rec.heard_at = was.last_heartbeat, was.heard_at
        for job_id, job in self._held.items():
            before = old_held.get(job_id)
            if before is not None:
                carry_transients(before, job)
        for job_id, pending in self._pending.items():
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
        (:meth:`settle`). The engine takes its allocation ids from the host's one
        counter, so no id is handed out twice however often the engine is rebuilt."""
        engine = self.host.fresh(self.sites.hosted(nodes.values()))  # each site lists its own
        admission = Admission(engine, self._queue_specs.values(), *self._fair_share())
        held = self._held
        # one allocation per charge: a job keeps those of its allocations that still fit; the
        # sites' foreign use (nobody's job, no quota: foreign_use.py) is one charge per holder
        charges: list[tuple[int | foreign_use.ForeignKey, Sequence[Allocation]]] = [
            (job.id, (a,)) for job in held.values() for a in job.allocations
        ]
        charges.extend(self.sites.foreign())
        done = self.host.reapply(
            engine,
            charges,
            lambda owner, a: (
                admission.restore(a, held[owner].queue, held[owner].flavor)
                if isinstance(owner, int)
                else engine.restore(a)
            ),
        )
        kept: dict[int, list[Allocation]] = {job_id: [] for job_id in held}
        foreign: dict[foreign_use.ForeignKey, tuple[Allocation, ...]] = {}
        for owner, allocations in done.kept.items():
            if isinstance(owner, int):
                kept[owner].extend(allocations)
            else:
                foreign[owner] = tuple(allocations)
        problems: list[Problem] = []
        waiting: set[foreign_use.ForeignKey] = set()
        for r in done.refused:
            if isinstance(r.owner, int):
                problems.append(problem_for(engine, r.owner, r.allocations[0], r.error))
            else:
                waiting.add(r.owner)
        for job in held.values():
            if not job.allocations:
                problems.append(Problem(job.id, f"job {job.id} is {job.state.value} on no device"))
        return Built(engine, admission, kept, problems, foreign_use.ForeignUse(foreign, waiting))

    def install(self, built: Built) -> None:
        """Serve ``built`` (made by :meth:`build` over the node records now in place); its
        engine goes on learning the workload from where the engine it replaces was."""
        self.host.install(built.engine)
        self.admission = built.admission
        self.foreign_use = built.foreign
        for job_id, allocations in built.allocations.items():
            if job_id in self._held:
                self._held[job_id].allocations = allocations
        self.retry_gate.capacity_changed()

    @property
    def engine(self) -> Engine:
        """The engine served (the host's)."""
        engine = self.host.engine
        assert engine is not None, "no engine built yet"
        return engine

    def use_power(self, power: PowerModel) -> None:
        """The power model the usage meter counts energy with (the operator's figures, the idle
        watts it learned), handed to the engine's energy scorer as one step: a snapshot, so the
        meter learning on after it changes nothing under a scheduling pass."""
        snapshot = power.with_overrides()
        with self._lock:
            self.host.use_power(snapshot)

    def rebuild_engine(self, conn: Connection | None = None) -> None:
        """A fresh engine from the node records, with every held allocation re-applied and
        re-charged. Used on start, after a failed write, and when a drained device is free;
        rare, so rebuilding beats patching. What the store holds that cannot be re-applied is
        set aside (:meth:`settle`) in ``conn``'s transaction or a new one."""
        built = self.build(self._nodes)
        self.install(built)
        problems = [*self._unreadable, *built.problems]
        self._unreadable = []
        if not problems:
            return
        if conn is not None:
            self.settle(conn, problems)
            return
        with self.db.begin() as own:
            self.settle(own, problems)

    def settle(self, conn: Connection, problems: list[Problem]) -> None:
        """Set ``problems`` aside in ``conn``'s transaction (``server/consistency.py`` says
        why): cordon what each touches, then requeue (or mark lost) each job, with an event, a
        log line and a ``/healthz`` note per job."""
        by_job: dict[int, list[Problem]] = {}
        for p in problems:
            by_job.setdefault(p.job_id, []).append(p)
        for job_id, found in sorted(by_job.items()):
            cordoned = [c for p in found for c in self._cordon_problem(conn, p)]
            reason = "; ".join(dict.fromkeys(p.reason for p in found))
            if job_id not in self.held_jobs:
                continue
            out = self.apply(conn, job_id, lc.Lost(StopCause.SET_ASIDE, f"set aside: {reason}"))
            done = "requeued" if out.requeue else f"marked {out.phase.value}"
            after = f"; {', '.join(cordoned)} cordoned" if cordoned else ""
            self.health.note(f"store inconsistent: {reason}: job {job_id} {done}{after}")

    def _cordon_problem(self, conn: Connection, p: Problem) -> list[str]:
        """Cordon the node and the devices ``p`` touches that are not cordoned yet."""
        done = []
        records = self.node_records
        if p.node is not None and p.node in records and not records[p.node].cordoned:
            self.cordon_node(conn, p.node, True)
            done.append(f"node {p.node}")
        for uuid in p.devices:
            rec = next(
                (r for r in records.values() if any(d.uuid == uuid for d in r.node.devices)),
                None,
            )
            if rec is not None and uuid not in rec.cordoned_devices:
                self.cordon_device(conn, rec, uuid, True)
                done.append(f"device {uuid}")
        return done

    @property
    def verdicts(self) -> Verdicts:
        """Whether a request could ever fit this pool (the host's, on the engine served)."""
        return self.host.verdicts

    @property
    def cycle(self) -> SchedulingCycle:
        """The scheduling cycle on the current quota books (rebuilt with them)."""
        if (
            self._cycle is None
            or self._cycle.admission is not self.admission
            or self._cycle.reservations is not self.reservations
            or self._cycle.defrag is not self.defrag
        ):
            self._cycle = SchedulingCycle(
                self.admission,
                self.verdicts,
                self._stop_cost,
                self.site_dispatch,
                self.reservations,
                self.defrag,
            )

        return self._cycle

    @property
    def capacity_gen(self) -> int:
        """The retry gate's capacity generation: a pending job whose ``tried`` is this one
        failed since the pool last changed."""
        return self.retry_gate.generation

    def bump(self) -> None:
        """Capacity may have grown: pending jobs are worth trying again."""
        self.retry_gate.capacity_changed()
        self.wake.set()

    def _fair_share(self) -> tuple[DecayedUsage | None, Callable[[], float] | None]:
        """The admission order's history and its clock (``xpupool up --fair-share history``);
        (None, None): DRF on what is held now. The one history outlives every rebuild."""
        return (None, None) if self.fair_share is None else (self.fair_share, self.clock)

    def forget_grants(self) -> None:
        """Tenants' or queues' limits change (under the lock): read them again when next asked."""
        self._grant_rows = {}

    def use_fair_share_history(self, half_life_s: float) -> None:
        """Order tenants by the share each held over a window decaying with ``half_life_s``
        (``engine/cycle/fair_share.py``; ``xpupool up --fair-share history``), starting from what
        the stored hourly usage says each held (``usage/fair_share_seed.py``), so that a restart
        does not wipe out who held the pool."""
        history = DecayedUsage(half_life_s)
        with self._lock:
            memory_mib, cards = self.admission.pool_totals()
            now = self.clock()
            with self.db.connect() as conn:
                held = fair_share_seed.held_by_tenant(
                    conn, now, half_life_s, memory_mib / 1024, cards
                )
            history.seed(now, held)
            self.fair_share = history
        self.rebuild_admission()

    def rebuild_admission(self) -> None:
        """New quota books after queues changed, re-charged from the held allocations."""
        with self._lock:
            self.admission = Admission(self.engine, self._queue_specs.values(), *self._fair_share())
            for job in self._held.values():
                for alloc in job.allocations:  # the flavour may change with the queue's quotas
                    job.flavor = self.admission.restore(
                        alloc, job.queue, job.flavor, in_engine=False
                    )
            self.retry_gate.capacity_changed()
            self.wake.set()

    # ------------------------------------------------------------------ what the services see
    # The services, the scheduler loop and the agent inside ``up`` reach the live state only
    # through these: read-only views, and named operations for each change (a source test,
    # tests/unit/server/test_plane_boundary.py, keeps it so). Call them under :meth:`locked` or :meth:`write`.
    @property
    def cluster_state(self) -> ClusterState:
        """The engine's columns, to read (device and node views, metrics)."""
        return self.engine.state

    @property
    def queued(self) -> Mapping[int, PendingJob]:
        """The pending jobs by id; read-only."""
        return MappingProxyType(self._pending)

    def queue_job(self, job: PendingJob) -> None:
        """``job`` waits in its queue (a submission, stored by the caller under the lock)."""
        self._pending[job.id] = job

    @property
    def site_network(self) -> SiteNetwork:
        """The sites file's links and datasets (what the site choice weighs)."""
        return self.site_dispatch.network

    @site_network.setter
    def site_network(self, network: SiteNetwork) -> None:
        self.site_dispatch.network = network

    def dispatched(self, job: PendingJob) -> Mapping[str, int]:
        """Per site, the pending jobs of ``job``'s shape dispatched there (the site choice's
        queue positions)."""
        return self._pending.dispatched(job.request)

    def dispatch(self, job_id: int, site: str | None) -> None:
        """Keep pending job ``job_id`` to ``site`` (the scheduling pass, as it stores the
        choice; None: to the sites it asked for again)."""
        self._pending.dispatch(job_id, site)

    def queued_tally(self, tenant: str) -> tuple[int, int]:
        """(pending jobs, their replicas) of ``tenant``."""
        return self._pending.tally(tenant)

    @property
    def held_jobs(self) -> Mapping[int, HeldJob]:
        """The jobs holding devices by id; read-only."""
        return MappingProxyType(self._held)

    def held_elastic(self) -> list[HeldJob]:
        """The held jobs with a replica range, in :attr:`held_jobs`' order."""
        return [self._held[i] for i in self._elastic]

    def hold(self, job: HeldJob) -> None:
        """``job`` holds devices now (placed by the scheduler loop, stored under the lock)."""
        self._held[job.id] = job
        if job.elastic is not None:
            self._elastic.setdefault(job.id)

    def start(self, job: HeldJob) -> None:
        """Run held ``job`` on the sites of its nodes (the scheduler loop, as it records the
        placement): the one way the scheduler's placements reach where work runs."""
        self.sites.start(job, self._nodes)

    # ------------------------------------------------------------------ the lock and the store
    @contextmanager
    def locked(self) -> Iterator[None]:
        """The plane's lock held for the block: what it reads of the books is one state, and
        what it decides from them still holds when it writes (:meth:`write` in the block takes
        the same lock again). Nothing outside the package takes the lock itself (``lock.py``)."""
        with self._lock:
            yield

    @contextmanager
    def write(self) -> Iterator[Connection]:
        """One store transaction under the plane's lock; commits on success.

        A store that fails to write (disk full, read-only) raises :class:`Unavailable` (503) with
        one line, marks the server unhealthy, and puts memory back to what the store holds, so a
        failed write changes nothing. While unhealthy, writes fail at once, without touching
        anything, until :meth:`check_store` sees the store take a write again."""
        self._lock.acquire_as_writer()
        try:
            if self.health.failure is not None:
                raise Unavailable(self.health.failure)
            try:
                conn = self._writer_connection()
                trans = conn.begin()
                try:
                    yield conn
                except BaseException:
                    if trans.is_active:
                        trans.rollback()
                    raise
                with self._lock.stall.entered():
                    trans.commit()
            except (OperationalError, OSError) as exc:
                self._drop_writer()
                raise self.store_failed(exc) from None
            except DBAPIError:
                if self.ownership is None or self.ownership.lost is None:
                    raise
                # a write that hung on a partition while its lease ran out, and reached the
                # store after a take-over (a job id the new plane took meanwhile): the store
                # is lost, which is the answer, and the fence refused the commit anyway
                self._drop_writer()
                raise StoreFenced(self.ownership.lost) from None
        finally:
            self._lock.release()

    def _statement_sent(self, *_args: object) -> None:
        if self._lock.held_here():
            self._lock.stall.enter()

    def _statement_answered(self, *_args: object) -> None:
        if self._lock.held_here():
            self._lock.stall.leave()

    def _writer_connection(self) -> Connection:
        """The connection :meth:`write` uses, kept between writes (under the lock, so one thread
        at a time): taking one from the pool and giving it back, which rolls back, cost about a
        tenth of what the store took per submission (issue 25). A write that failed on the
        store drops it; the next write connects again."""
        conn = self._writer
        if conn is None or conn.closed or conn.invalidated:
            conn = self._writer = self.db.connect()
            conn.info[STATEMENT_WATCH] = self._lock.stall  # its driver-level writes are marked
        return conn

    def _drop_writer(self) -> None:
        conn, self._writer = self._writer, None
        if conn is not None:
            with suppress(Exception):  # already broken: nothing more to undo
                conn.invalidate()  # not back to the pool: the store failed under it

    @property
    def writers_waiting(self) -> int:
        """Threads in :meth:`write` waiting for the lock (a scheduling pass lets them in)."""
        return self._lock.writers_waiting

    def wait_for_writers(self, timeout_s: float) -> bool:
        """Block (``timeout_s`` at most) until no thread waits in :meth:`write` for the lock;
        whether none does."""
        return self._lock.wait_for_writers(timeout_s)

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

    @property
    def store_is_local(self) -> bool:
        """Whether the store is a file of this host (SQLite), not a server over the network:
        what the event loop may wait for (``routers/jobs.py``)."""
        return self.db.dialect.name == "sqlite"

    def store_stall(self) -> str | None:
        """Why the store counts as stalled (``plane/store_stall.py``), or None."""
        waited = self._lock.stall.stalled_s()
        return None if waited is None else f"the store has not answered for {waited:.0f} s"

    def store_failed(self, exc: BaseException) -> Unavailable:
        """Record a failed write (logged once) and undo what memory did ahead of the store;
        returns the error to raise."""
        reason = store_failure(exc)
        self.health.fail(reason)
        with self._lock:
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
        if self.ownership is not None and self.ownership.lost is not None:
            # for good, and the reason to give (a failed write may have said something else
            # since); and the lock may be held by a write stuck on a partition
            self.health.fail(self.ownership.lost)
            return False
        with self._lock:
            try:
                with self._lock.stall.entered(), self.db.begin() as conn:
                    store.mark_opened(conn, self.clock())
                probe_writable(self.data_dir)
                probe_writable(self.logs.dir)  # a run handed out writes its log's first line
                if self._stale:
                    self.reload()
            except (OperationalError, OSError) as exc:
                self.health.fail(store_failure(exc))
                return False
            now = self.monotonic()
            for rec in self._nodes.values():
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
        held = self._held.get(job_id)
        if writes is not None and held is None and job_id not in self._pending:
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
            store.write_job(conn, job_id, cols, event_row)
        else:
            writes.update(job_id, cols)
            writes.event(event_row)
            if out.release or out.requeue:
                writes.flush(conn)  # both go on to read or write the store
        if held is not None:
            if out.phase in HOLDING_STATES:
                held.state = out.phase
            stopping = out.stop is not None and held.stop is None
            held.stop = out.stop
            held.stop_reason = out.stop_reason if out.stop else ""
            if out.attempt is not None or isinstance(event, lc.Adopt):
                held.attempt, held.dispatched = out.attempt or held.attempt, True
            if cols.get("started_at") is not None:
                held.started_at = now
            if out.release:
                if out.phase is JobPhase.SUCCEEDED:
                    self._learn_run(conn, held, now)
                self.release_job(conn, held)
            elif stopping:  # the sites of its nodes stop it; released when they report it ended
                self.sites.stop(held, self._nodes)
        elif out.phase is not JobPhase.PENDING:
            self._pending.pop(job_id, None)
        if out.requeue:  # read back: the row as stored now (its retry's not_before)
            self._pending[job_id] = pending_from_row(store.job_row(conn, job_id))
        return out

    def _status(
        self, conn: Connection, job_id: int, held: HeldJob | None, event: lc.Event
    ) -> lc.JobStatus | None:
        """The job as the transition sees it (None: not stored). A placement or a start needs
        only memory; a stop or an end reads the job's retry policy from the store."""
        if held is not None:
            phase: JobPhase = held.state
        elif job_id in self._pending:
            phase = JobPhase.PENDING
        else:
            stored = store.job_phase(conn, job_id)
            if stored is None:
                return None
            phase = stored
        stop, stop_reason = (held.stop, held.stop_reason) if held else (None, "")
        may_run = held.may_run if held else False
        if not isinstance(event, (lc.Stop, lc.Ended, lc.Lost, lc.LeaseExpired)):
            return lc.JobStatus(phase, stop, stop_reason, may_run)
        row = store.job_row(conn, job_id)
        return lc.JobStatus(
            phase, stop, stop_reason, may_run, int(row["retries"] or 0), lc.retry_policy(row)
        )

    def _learn_run(self, conn: Connection, job: HeldJob, now: float) -> None:
        """The site choice's wait estimator learns the run time of a job that succeeded
        (``learned_runs.py``), where there are sites to choose between or moves to faster cards
        (which weigh it for a job without ``max_runtime``); with neither nothing weighs it."""
        if len(self.engine.sites()) >= 2 or self.faster is not None:
            learned_runs.learn_run(conn, self.site_dispatch.runtimes, job, now)

    def release_job(self, conn: Connection, job: HeldJob) -> None:
        """Give back every allocation of ``job`` (engine, quota and store)."""
        self.meter.job_released(job.id, job.attempt, self.clock())  # its runs end (usage/)
        self.card_idle.released(job.allocations, self.clock())  # idle from now (re-cuts)
        for alloc in job.allocations:
            self.admission.release(alloc.id)
        store.delete_allocations(conn, job.id)
        nodes = {a.node for a in job.allocations}
        job.allocations = []
        self._held.pop(job.id, None)
        self._elastic.pop(job.id, None)
        self.advance_drains(conn, nodes)
        foreign_use.retry(self)  # a foreign charge waiting for these cards
        self.bump()

    def count_run(self, job_id: int, attempt: int, why: Callable[[RunView], str]) -> RunView | None:
        """Count run ``attempt`` of held job ``job_id`` as handed out (``Dispatch``, with the
        reason ``why(run)`` in its events) unless it is counted already, as one step; the run
        as counted, or None when the job is not held, is stopping, or holds another attempt
        (a start after an adoption, a late task of an older run)."""
        with self.write() as conn:
            job = self._held.get(job_id)
            if job is None or job.stop is not None:
                return None
            if job.attempt < attempt:
                self.apply(conn, job_id, lc.Dispatch(attempt, why(RunView.of(job))))
            elif job.attempt != attempt:
                return None
            return RunView.of(job)

    def runs_past_limit(self) -> list[tuple[int, float]]:
        """(job, its max_runtime_s) of every run that has lasted longer than its limit and is
        not being stopped yet."""
        now = self.clock()
        with self._lock:
            return [
                (j.id, j.max_runtime_s)
                for j in self._held.values()
                if j.max_runtime_s is not None
                and j.started_at is not None
                and j.stop is None
                and now - j.started_at > j.max_runtime_s
            ]

    def runs_idle(self) -> list[tuple[int, str]]:
        """(job, reason) of every run whose cards stayed idle as long as its ``idle_stop`` asks
        (``server/idle_runs.py``), not being stopped yet; each run's idle time brought up to now
        on the way."""
        with self._lock:
            return idle_runs(self._held.values(), self.live.last, self.clock())

    def take_job_id(self) -> int:
        """The id of the job being submitted (under the lock, in :meth:`write`): recorded beside
        the store first (:attr:`before_job_id`), so that no store hands it out again, and never
        handed out again by this plane. Ids come from memory: one insert, no re-read; a write
        that fails reloads the mark from the store with everything else."""
        job_id = self.next_job_id
        self.before_job_id(job_id)
        self.next_job_id = job_id + 1
        return job_id

    def _stop_cost(self, job_id: int) -> StopCost:
        """What stopping held job ``job_id`` now would lose: checkpoint-aware preemption."""
        return stop_cost_of(self._held, self.clock(), job_id)

    def checkpoint(self, job_id: int) -> float | None:
        """Job ``job_id`` saved its state now (server/job_checkpoints.py): the time of its last
        checkpoint kept, or None when it is not running."""
        with self.write() as conn:
            if not record_checkpoint(conn, self._held, job_id, self.clock()):
                return None
            return self._held[job_id].checkpoint_at

    def report_progress(self, job_id: int, replica: int, rate: float) -> Progressed:
        """Replica ``replica`` of job ``job_id`` runs at ``rate`` per second (its owner says so,
        through the API): learned as one step (server/throughput_knowledge.py). Conflict when the
        job is not running or has no kind; RequestError naming ``replica`` for one it lacks."""
        with self.write() as conn:
            job = self._held.get(job_id)
            if job is None or job.state is not JobPhase.RUNNING:
                raise Conflict(f"job {job_id} is not running")
            if job.kind is None:
                raise Conflict(
                    f"job {job_id} has no kind: its speeds are learned under its kind=, image"
                    " or model, and it was submitted with none"
                )
            if not any(a.replica == replica for a in job.allocations):
                replicas = len(job.allocations)
                raise RequestError("replica", replica, f"job {job_id} has {replicas} replica(s)")
            got = self.throughput.report_run(conn, self.engine, job, replica, rate, self.clock())
            return Progressed(job.kind, got)

    def stop_job(self, job_id: int, stop: lc.Stop) -> None:
        """Apply ``stop`` to job ``job_id`` as one step; :class:`lc.IllegalTransition` (409)
        when the job cannot be stopped now (it ended meanwhile)."""
        with self.write() as conn:
            self.apply(conn, job_id, stop)

    def stop_jobs(self, stops: list[tuple[int, lc.Stop]]) -> list[int]:
        """Apply each (job, stop) in one transaction; returns the jobs stopped. A job that
        ended, or began stopping, between the caller's look and the lock is left as it is."""
        done = []
        with self.write() as conn:
            for job_id, stop in stops:
                try:
                    self.apply(conn, job_id, stop)
                except lc.IllegalTransition:
                    continue
                done.append(job_id)
        return done

    def forget_jobs(self, job_ids: list[int]) -> None:
        """Delete finished jobs ``job_ids`` (rows and events) in one transaction; the pool's
        first job id moves above every id handed out, so that no id (nor its log directory) is
        ever handed out again, even when the newest jobs are the ones deleted."""
        with self.write() as conn:
            assert not any(i in self._held or i in self._pending for i in job_ids), "not finished"
            store.delete_jobs(conn, job_ids, self.next_job_id)

    def log_path(self, job_id: int, replica: int) -> Path:
        return self.logs.path(job_id, replica)

    def notify(self, event: str, seconds: float) -> None:
        for observer in self.observers:
            observer(event, seconds)


def check_request_names(engine: Engine, req: Request, field: str = "request.node_policy") -> None:
    """Fail early on a policy name the engine does not know (``field`` names where it came from)."""
    if req.node_policy:
        known_profile(engine.profiles, req.node_policy, field)
