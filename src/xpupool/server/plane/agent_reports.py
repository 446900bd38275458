"""An agent's heartbeats, replica reports and log uploads, and the silence of lost nodes, applied
to the plane's books as the plane's own operations: each takes the plane's lock itself, so what it
reads of the node and job books is one state and what it changes (node status, replica states,
the jobs they move, the runs handed out, a log's bytes) is one step, in memory and in the store.
``services/agents.py`` keeps the protocol's edge (what a handed-out run carries: its command,
secrets, volumes, environment, log caps) and calls these; nothing outside the package takes the
lock (``lock.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, select

from xpupool.model.allocation import Allocation
from xpupool.model.errors import NotFound, RequestError, Unavailable
from xpupool.server import job_lifecycle as lc
from xpupool.server import site_health
from xpupool.server.auth import Principal
from xpupool.server.body_limit import MAX_LOG_CHUNK
from xpupool.server.job_checkpoints import record_checkpoint
from xpupool.server.job_logs import LogCaps
from xpupool.server.plane import card_recut, elastic_runs, site_runs
from xpupool.server.plane import node_lifecycle as nl
from xpupool.server.plane.records import HeldJob, NodeRecord
from xpupool.server.plane.run_logs import attempt_header as attempt_header
from xpupool.server.plane.run_logs import attempt_start_path, open_replica_log
from xpupool.server.schemas.agent_protocol import (
    FINAL_REPLICA_STATES,
    CardRecut,
    DeviceMetrics,
    Heartbeat,
    HeartbeatReply,
    ReplicaReport,
    ReplicaState,
    StartingReport,
    Work,
)
from xpupool.server.schemas.jobs import JobPhase, StopCause
from xpupool.server.schemas.nodes import NodeStatus
from xpupool.server.sites.agent_pool import agent_pool
from xpupool.server.storage.jobs import jobs as t_jobs
from xpupool.server.storage.tenants import queues as t_queues

if TYPE_CHECKING:
    from xpupool.server.plane.control import ControlPlane

__all__ = [
    "STEP_EVENT_EVERY_S",
    "WorkOf",
    "append_log",
    "apply_heartbeat",
    "apply_site_metrics",
    "apply_site_reports",
    "attempt_header",
    "hear_idle",
    "mark_lost_nodes",
]

STEP_EVENT_EVERY_S = 15.0  # a replica's changing start step (a pull's layers) in its events

WorkOf = Callable[[Connection, HeldJob, Allocation, Any, "str | None"], Work]
"""What a heartbeat's reply hands out for one replica: (the transaction, the held job, the
replica's allocation, the job's row, its queue's stored network) -> the run, shaped by
``services/agents.py`` in the heartbeat's transaction."""


def apply_heartbeat(
    plane: ControlPlane, body: Heartbeat, who: Principal | None, work: WorkOf
) -> HeartbeatReply:
    """Apply one heartbeat of ``body.node`` (``who`` sent it: named in the audit rows of reports
    it gets ignored) and answer it, as one step: the node, its held jobs and their replicas are
    read as one state, and what the heartbeat changes (the node heard, its metrics, its replicas'
    states and the jobs they move, the runs handed out) is written in one transaction with the
    reply's reads. Metrics for a device the node did not register are 422 and the heartbeat
    changes nothing; reports for replicas this node does not hold are ignored and recorded.
    ``work`` shapes what the reply hands out for one replica (the services' part:
    ``services/agents.py``)."""
    now = plane.clock()
    with plane.write() as conn:
        rec = plane.node(body.node)
        if rec is None:
            raise NotFound("node", body.node)
        _check_metrics(rec, body)
        plane.heard(conn, [body.node], now)
        if rec.status is NodeStatus.LOST:
            plane.node_event(conn, body.node, nl.Heard())  # ready again
        for m in body.metrics:
            plane.record_metrics(m, now)
        plane.card_health.observe(plane, conn, body.node, body.metrics)  # cordon, empty, settle
        if body.volumes is not None:  # the node's last measure replaces its earlier one
            plane.volume_usage[body.node] = (now, list(body.volumes))
        strangers: set[tuple[int, int]] = set()  # reported, not held: stop them if running
        for report in body.replicas:
            if _holds(plane, body.node, report):
                _apply_report(plane, conn, body.node, report)
            else:
                strangers.add((report.job_id, report.replica))
                plane.audit.report_ignored(conn, who, body.node, report.job_id, report.replica)
        for starting in body.starting:
            if _holds(plane, body.node, starting):
                _step(plane, conn, starting, now)
        for failure in body.recut_failed:  # its re-cuts the agent could not carry out
            card_recut.failed(plane, conn, rec, failure.card, failure.reason)
        reported = {(r.job_id, r.replica) for r in body.replicas}
        reply = _reply(plane, conn, body.node, reported, work)
        now_rec = plane.node(body.node)  # None: its reports just ended the drain that deleted it
        if now_rec is not None and now_rec.source == "agent":  # a cluster-file node re-cuts not
            reply.recut = [
                CardRecut(card=card, layout=layout)
                for card, layout in card_recut.orders(plane, conn, now_rec)
            ]
        # a process the server no longer gives this node (released while the agent started it,
        # from before a restart, or an earlier attempt) must not go on using devices that others
        # may now hold; the agent starts the current attempt once it is gone
        given = {(w.job_id, w.replica) for w in reply.run} | set(reply.stop)
        for r in body.replicas:
            key = (r.job_id, r.replica)
            stale = key not in given or key in strangers
            if r.state is ReplicaState.RUNNING and stale and key not in reply.stop:
                reply.stop.append(key)
        return reply


def apply_site_reports(plane: ControlPlane, reports: Sequence[site_runs.SiteReport]) -> None:
    """Replica reports of a site that runs work itself, ``(node, report)``, and its runs'
    :class:`~xpupool.server.plane.site_runs.Waiting` notes, many in one write, in their order
    (a restarted plane's Kubernetes site reads back every pod of its held jobs at once: a
    heartbeat or a note each was a write each): each report applied as its node's heartbeat
    applies it, one for a replica that node does not hold ignored. Its nodes are not heard by
    them: such a site's API server answering is its nodes' sign of life (``site_health``)."""
    with plane.write() as conn:
        for item in reports:
            if isinstance(item, site_runs.Waiting):
                site_runs.note_waiting(plane, conn, item)
                continue
            node, report = item
            if _holds(plane, node, report):
                _apply_report(plane, conn, node, report)


def apply_site_metrics(plane: ControlPlane, node: str, metrics: Sequence[DeviceMetrics]) -> int:
    """Card readings of a site's ``node`` that the site read itself (a Kubernetes site scraping
    its node agents: ``k8s/site/node_power.py``), kept as a heartbeat's are
    (:meth:`~xpupool.server.plane.nodes.NodeBook.record_metrics`), so the meter, the live
    metrics and the idle power figures read them as they read an agent's. Readings of cards the
    node does not have in the books are dropped (the site read them, no agent sent them: nothing
    to refuse); the node is not heard by them (its site's API server answering is its sign of
    life: ``site_health``), nor is card health read from them (the node's annotations carry it).
    Returns the readings kept."""
    now = plane.clock()
    with plane.locked():
        rec = plane.node(node)
        if rec is None:
            return 0
        known = {d.uuid for n in (rec.node, rec.target) if n is not None for d in n.devices}
        kept = [m for m in metrics if m.uuid in known]
        for m in kept:
            plane.record_metrics(m, now)
        return len(kept)


def hear_idle(plane: ControlPlane, nodes: list[str]) -> set[str]:
    """What a heartbeat with no metrics and no reports does, for many nodes in one transaction:
    each is seen now (memory, and one UPDATE per ``IDLE_CHUNK`` names). Returns the names among
    ``nodes`` that need a heartbeat of their own: those holding an allocation (the reply of
    their heartbeat says what to run or stop), unknown ones (answered 404 there) and lost ones
    (their heartbeat makes them ready again). Costs a dict update per node and one pass over
    the held allocations, not a heartbeat per node (issue 25). The nodes and the held jobs are
    read as one state, and the nodes heard in one step."""
    now = plane.clock()
    own: set[str] = set()
    with plane.write() as conn:
        seen = []
        for name in nodes:
            rec = plane.node(name)
            if rec is None or rec.status is NodeStatus.LOST:
                own.add(name)
                continue
            seen.append(name)
        plane.heard(conn, seen, now)
        holding = agent_pool(plane.sites).busy(nodes, plane.held_jobs)
    return own | holding


def _check_metrics(rec: NodeRecord, body: Heartbeat) -> None:
    """Metrics are kept per device UUID: only for devices this node registered (issue 18: 100k
    invented UUIDs grew the server by 179 MiB)."""
    known = {d.uuid for n in (rec.node, rec.target) if n is not None for d in n.devices}
    for i, m in enumerate(body.metrics):
        if m.uuid not in known:
            raise RequestError(
                f"metrics[{i}].uuid", m.uuid, f"node {body.node} registered no such device"
            )


def _holds(plane: ControlPlane, node: str, r: ReplicaReport | StartingReport) -> bool:
    """True if ``node`` holds the replica ``r`` reports on. A report for one it does not hold is
    stale (released while the agent ran it, from before a restart, or of an earlier attempt than
    the job's current one) or forged: it is ignored and recorded, rather than failing the
    heartbeat, so that one stale process cannot make a node look dead; the reply tells the agent
    to stop that process."""
    job = plane.held_jobs.get(r.job_id)
    if job is None or (r.attempt is not None and job.attempt and r.attempt != job.attempt):
        return False  # an earlier run (or a later one this server never counted): not ours
    return any(a.replica == r.replica and a.node == node for a in job.allocations)


def _apply_report(plane: ControlPlane, conn: Connection, node: str, r: ReplicaReport) -> None:
    job = plane.held_jobs.get(r.job_id)
    if job is None or not any(a.replica == r.replica and a.node == node for a in job.allocations):
        return  # a replica the server no longer gives this node: the reply tells the agent to stop
    if r.replica in job.shrinking and r.state in FINAL_REPLICA_STATES:
        elastic_runs.replica_gone(plane, conn, job, r.replica, node)  # a shrink's: cards freed
        return
    if r.state is ReplicaState.RUNNING and r.checkpoint_age_s is not None:
        record_checkpoint(conn, plane.held_jobs, job.id, plane.clock() - r.checkpoint_age_s)
    if r.state is ReplicaState.RUNNING and r.progress_rate is not None:
        plane.throughput.report_run(
            conn, plane.engine, job, r.replica, r.progress_rate, plane.clock()
        )
    if r.state is ReplicaState.RUNNING and r.memory_used_mib:
        job.device_memory_used_mib[r.replica] = dict(r.memory_used_mib)
    else:
        job.device_memory_used_mib.pop(r.replica, None)
    if job.replica_states.get(r.replica) == r.state:
        _limits(plane, conn, job, r)
        if r.state is ReplicaState.RUNNING and r.reason and job.state is JobPhase.RUNNING:
            _flag(plane, conn, job.id, f"replica {r.replica}: {r.reason}")
        return
    if r.stop_cause == "lease_expired" and job.stop is None:
        # its agent was cut off long enough for the lease to run out: as a lost node, at once
        why = f"replica {r.replica} stopped on {node}: its lease expired (agent cut off)"
        plane.apply(conn, job.id, lc.LeaseExpired(why, reported=True))
        return
    job.replica_states[r.replica] = r.state
    _meter(plane, job, node, r)
    if r.exit_code is not None:
        job.exit_codes[r.replica] = r.exit_code
    if r.state is ReplicaState.FAILED and r.reason:
        job.failures[r.replica] = r.reason
    replicas = {a.replica for a in job.allocations}
    states = [job.replica_states.get(i) for i in replicas]
    if (
        r.state is not ReplicaState.STOPPED
        and job.state is not JobPhase.RUNNING
        and not _never_started(r)
    ):
        # a replica that ran and ended between two heartbeats was still running: record it
        # a site's replica (a pod) has no pid to show; an agent's that has none never started
        started = (
            f" (pid {r.pid})"
            if r.pid is not None
            else ""
            if r.state is ReplicaState.RUNNING
            else " (its process never started)"
        )
        plane.apply(conn, job.id, lc.Start(f"started on {node}{started}"))
    _limits(plane, conn, job, r)
    finished = all(st in FINAL_REPLICA_STATES for st in states)
    if r.state is ReplicaState.FAILED and job.stop is None and not finished:
        plane.apply(conn, job.id, lc.Stop(StopCause.REPLICA_FAILED, _failure(job, r.replica)))
        return
    if not finished:
        return
    failed = [i for i in replicas if job.replica_states.get(i) is not ReplicaState.SUCCEEDED]
    # the job's exit code: the largest of the failed replicas' own, or empty when none of them
    # has one (stopped, or never started: a supervisor or launch failure is not "exit 0")
    codes = [job.exit_codes[i] for i in (failed or replicas) if i in job.exit_codes]
    code = max(codes, key=abs) if codes else None
    reason = _failure(job, failed[0], code) if failed else "all replicas exited 0"
    plane.apply(conn, job.id, lc.Ended(bool(failed), reason, code))


def _meter(plane: ControlPlane, job: HeldJob, node: str, r: ReplicaReport) -> None:
    """Tell the meter a replica began or stopped holding its cards (server/usage/meter.py)."""
    if r.state is ReplicaState.RUNNING:
        rec = plane.node(node)
        plane.meter.replica_started(job, r.replica, rec.node if rec else None, plane.clock())
    elif r.state in FINAL_REPLICA_STATES:
        plane.meter.replica_ended(job.id, job.attempt, r.replica, plane.clock())


def _never_started(r: ReplicaReport) -> bool:
    """The agent reports a replica failed with neither a process nor an exit code: it did not
    start one (it could not build the launch, or it was handed an allocation that already ran
    there: docs/agent.md). The job is failed with the agent's reason, never marked started."""
    return r.state is ReplicaState.FAILED and r.pid is None and r.exit_code is None


def _limits(plane: ControlPlane, conn: Connection, job: HeldJob, r: ReplicaReport) -> None:
    """Which CPU/memory enforcement the replica runs under: one event per replica run; and its
    ports, for the job's view (not stored: reported again by an agent after a restart)."""
    if r.ports:
        job.ports[r.replica] = list(r.ports)
    if r.limits and job.limits.get(r.replica) != r.limits:
        job.limits[r.replica] = r.limits
        plane.apply(conn, job.id, lc.Note(f"replica {r.replica}: {r.limits}", sets_reason=False))


def _step(plane: ControlPlane, conn: Connection, r: StartingReport, now: float) -> None:
    """A replica's start step (an image's pull: ``pulling IMAGE: 3 layers copied``) in the job's
    events: the first at once, a changed one at most every :data:`STEP_EVENT_EVERY_S`, so that a
    long pull is followed without flooding the events (the agent sends it every heartbeat)."""
    job = plane.held_jobs[r.job_id]
    last = job.steps.get(r.replica)
    same_run = last is not None and last[0] == r.attempt
    if same_run and last is not None and (last[1] == r.step or now < last[2] + STEP_EVENT_EVERY_S):
        return
    job.steps[r.replica] = (r.attempt, r.step, now)
    plane.apply(conn, job.id, lc.Note(f"replica {r.replica}: {r.step}", sets_reason=False))


def _failure(job: HeldJob, replica: int, code: int | None = None) -> str:
    """Why a replica failed, in the job's reason: ``replica 1 failed (3)`` when a sibling is
    still being stopped, ``replica 0 exited with 137`` when it was the last; followed by the
    agent's reason when that says more (killed for memory, could not start). A replica with no
    exit code of its own never ran (or was stopped): ``replica 0: <the agent's reason>``, which
    names the step that failed, never an exit code it did not have."""
    reason = job.failures.get(replica, "")
    if replica not in job.exit_codes:
        return f"replica {replica}: {reason}" if reason else f"replica {replica} failed"
    if code is None:
        text = f"replica {replica} failed ({job.exit_codes.get(replica)})"
    else:
        text = f"replica {replica} exited with {code}"
    plain = (f"exited with {job.exit_codes.get(replica)}", f"exited with {code}")
    return f"{text}: {reason}" if reason and reason not in plain else text


def _flag(plane: ControlPlane, conn: Connection, job_id: int, reason: str) -> None:
    """A running replica's problem (over its device memory): recorded once as the job's reason
    and an event, not again while the agent keeps reporting the same text."""
    current = conn.execute(select(t_jobs.c.reason).where(t_jobs.c.id == job_id)).scalar_one()
    if current != reason:
        plane.apply(conn, job_id, lc.Note(reason))


def _reply(
    plane: ControlPlane,
    conn: Connection,
    node: str,
    reported: set[tuple[int, int]],
    work: WorkOf,
) -> HeartbeatReply:
    """What ``node`` must run and stop. ``reported``: the replicas its heartbeat reported; one
    it ran before and reports no more was lost with its agent (a restart): run again, counted
    as the next attempt."""
    run: list[Work] = []
    stop: list[tuple[int, int]] = []
    rows: dict[int, Any] = {}
    rec = plane.node(node)  # None: its reports just ended the drain that deleted it
    held_here = [] if rec is None else agent_pool(plane.sites).on_node(rec, plane.held_jobs)
    networks: dict[str, str | None] = {}
    if held_here:
        ids = sorted({job.id for job, _ in held_here})
        for row in conn.execute(select(t_jobs).where(t_jobs.c.id.in_(ids))).mappings():
            rows[row["id"]] = row
        queues = sorted({job.queue for job, _ in held_here})
        q = select(t_queues.c.name, t_queues.c.network).where(t_queues.c.name.in_(queues))
        networks = {r.name: r.network for r in conn.execute(q)}
    for job, alloc in held_here:
        if job.stop is not None or alloc.replica in job.shrinking:  # the job, or a shrink's
            if job.replica_states.get(alloc.replica) not in FINAL_REPLICA_STATES:
                stop.append((job.id, alloc.replica))
            continue
        if job.replica_states.get(alloc.replica) in FINAL_REPLICA_STATES:
            continue
        gone = job.replica_states.get(alloc.replica) is ReplicaState.RUNNING and (
            (job.id, alloc.replica) not in reported
        )
        if gone:
            del job.replica_states[alloc.replica]
        if gone or not job.dispatched:
            _dispatch(plane, conn, job, adopt=not gone)
        row = rows[job.id]
        job.handed.add(alloc.replica)
        run.append(work(conn, job, alloc, row, networks.get(job.queue)))
    return HeartbeatReply(
        run=run,
        stop=stop,
        heartbeat_s=plane.heartbeat_s,
        lease_s=plane.lease.lease_s,
        lease_grace_s=plane.lease.grace_s,
    )


def _dispatch(plane: ControlPlane, conn: Connection, job: HeldJob, *, adopt: bool) -> None:
    """A hand-out of ``job`` for a new run, counted: its first by this server, or again after
    an agent lost a replica it ran. With ``adopt``, a run an agent already reports (one from
    before a restart of the server or of the agent: its reports carry the job's current
    attempt) is adopted as it is (:class:`~xpupool.server.job_lifecycle.Adopt`), not counted
    again. A run after the first starts its replicas' logs with an attempt line, so that no line
    of an earlier run is shown as this run's; where that run's bytes start is recorded beside
    the log (:func:`append_log` keeps each byte once)."""
    nodes = ", ".join(sorted({a.node for a in job.allocations}))
    running = ReplicaState.RUNNING in job.replica_states.values()
    if adopt and job.state is JobPhase.RUNNING and running:
        if job.attempt == 0:  # a run nobody counted (reported before it was handed out)
            plane.apply(conn, job.id, lc.Dispatch(1, f"attempt 1 running on {nodes}"))
        else:
            why = f"attempt {job.attempt} adopted, still running on {nodes}"
            plane.apply(conn, job.id, lc.Adopt(why))
        return
    attempt = job.attempt + 1
    plane.apply(conn, job.id, lc.Dispatch(attempt, f"attempt {attempt} handed to {nodes}"))
    with plane.file_writes():
        for replica in sorted({a.replica for a in job.allocations}):
            header = attempt_header(attempt) if attempt > 1 else b""
            open_replica_log(plane, job, replica, attempt, header)


def _attempt_start(log: Path, attempt: int) -> int | None:
    """Where ``attempt``'s bytes start in ``log``; None when the file names another attempt
    (0 when there is no such file: a log of a first run)."""
    try:
        text = attempt_start_path(log).read_text().split()
    except OSError:
        return 0
    if len(text) != 2 or not all(p.isdigit() for p in text):
        return 0
    return int(text[1]) if int(text[0]) == attempt else None


def append_log(
    plane: ControlPlane,
    node: str,
    job_id: int,
    replica: int,
    chunk: bytes,
    offset: int | None = None,
    attempt: int | None = None,
    *,
    caps_of: Callable[[str], LogCaps],
) -> None:
    """Agents ship captured output here; only the node running that replica may write it. What
    the server keeps of it is bounded by ``server/job_logs.py`` (caps per replica, job and
    tenant, and the disk's reserve); a chunk it cannot keep is dropped, never refused.
    ``offset`` (where ``chunk`` starts in the output of run ``attempt``): what the server has of
    it already is skipped, so an agent that sends again after a restart duplicates nothing; a
    chunk of another attempt than the job's current one is dropped. While the store cannot be
    written, uploads are 503 as every change is (the agent sends them again). The replica's job
    and what its log holds are read as one state, and the chunk kept in the same step;
    ``caps_of(queue)``: what the logs of a job of that queue may take (``services/grants.py``)."""
    with plane.locked():
        if plane.health.failure is not None:
            raise Unavailable(plane.health.failure)
        job = plane.held_jobs.get(job_id)
        if job is None or not any(a.node == node and a.replica == replica for a in job.allocations):
            raise NotFound("replica", f"{job_id}/{replica} on {node}")
        chunk = chunk[:MAX_LOG_CHUNK]
        end = None
        missing = 0
        if offset is not None:
            start = _attempt_start(plane.log_path(job_id, replica), attempt or max(job.attempt, 1))
            if start is None or (attempt is not None and job.attempt and attempt != job.attempt):
                return  # an earlier run's output: not this attempt's log
            end = offset + len(chunk)
            taken = plane.logs.taken(job_id, replica, start)
            chunk = chunk[max(taken - offset, 0) :]
            missing = max(offset - taken, 0)  # the agent's copy rotated them away unsent
        caps = caps_of(job.queue)
        plane.logs.append(job_id, replica, job.tenant, chunk, caps, taken=end, missing=missing)


def mark_lost_nodes(plane: ControlPlane) -> list[str]:
    """Mark nodes silent for longer than ``lost_after_s`` as lost (nothing new is placed
    there), and deal with their jobs once the lease on their replicas has surely run out
    (``plane.lease.requeue_after_s`` of silence): requeue (the default) or fail with state
    'lost'. Until then the jobs keep their devices: the old copy may still be running. Returns
    the nodes newly marked. Silence is monotonic time since the server last heard from the node
    (or since it started): a step of the wall clock changes nothing here. An agent's node is
    heard by its heartbeats, a Kubernetes site's while the site's API server answers
    (``site_health.hear``, first); no lease stops a pod, so on a silent Kubernetes node only a
    job saying ``on_site_lost: requeue`` is requeued. The nodes and the jobs they hold are read
    as one state, and marked and requeued in one transaction."""
    now = plane.monotonic()
    lost: list[str] = []
    needed = plane.lease.requeue_after_s
    with plane.write() as conn:
        site_health.hear(plane, conn)  # Kubernetes sites whose API server answers
        # a copy: requeueing the jobs of a node the admin deletes removes the node (a drain)
        silent_nodes: list[tuple[str, float]] = []
        pods: set[str] = set()  # of those, a Kubernetes site's nodes
        for name, rec in plane.heard_node_records():
            if rec.source != "agent":
                pods.add(name)
            silent = now - rec.heard_at if rec.heard_at is not None else float("inf")
            if rec.status is not NodeStatus.LOST:
                if silent <= plane.lost_after_s:
                    continue
                plane.node_event(conn, name, nl.Silent())
                lost.append(name)
            silent_nodes.append((name, silent))
        # sites whose every node is lost (issue 51): their jobs wait, unknown, before any lease
        site_health.check(plane, conn)
        for name, silent in silent_nodes:
            if silent < needed:
                continue
            victims: list[HeldJob] = [  # an unknown job waits for its site (site_health.py)
                j
                for j in plane.held_jobs.values()
                if j.state is not JobPhase.UNKNOWN and any(a.node == name for a in j.allocations)
            ]
            waited = max(plane.lost_after_s, needed)
            reason = f"node {name} lost (no heartbeat for {waited:g} s; lease of its replicas over)"
            if name in pods:  # its pods run on unseen: only a job that allows it is requeued
                victims = [j for j in victims if site_health.policy(conn, j.id) == "requeue"]
                reason = (
                    f"node {name} lost (its site's API server silent for {waited:g} s;"
                    " on_site_lost: requeue)"
                )
            for job in victims:
                plane.apply(conn, job.id, lc.LeaseExpired(reason, silent, needed))
    return lost
