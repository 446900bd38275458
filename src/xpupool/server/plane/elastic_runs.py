"""Elastic jobs on the plane's agent sites (issue 54 part 1): the cycle's grow and shrink
decisions (``engine/cycle/elastic.py``) carried out, stored and handed to the agents.

A job submitted with ``replicas=MIN..MAX`` is placed at its minimum (replicas ``0..MIN-1``) like
any job. After each scheduling pass (the pending jobs had their chance first) :func:`grow` gives
each running elastic job at most one more replica where its queue's quota (borrowing included)
and the pool have room: the new replica gets a number above the others', never one used before
in the run (existing replicas keep theirs, so their ranks hold; an agent never takes it for an
old one), an allocation row beside the others (the store says which replicas exist:
a restarted plane holds the same, and counts those from ``MIN`` on as extras again), an event,
and is handed to its node's agent at its next heartbeat like any replica. A pending job refused
for capacity that the release of extras would let in gets a :class:`Shrink` from the cycle: the
plane stops those replicas (the highest-numbered of each job first, :func:`_highest_first`, so the
ranks below stay as they were) and the job waits until the agents report them gone; only then are
their cards freed (:func:`replica_gone`), as a preemption's are. A job never shrinks below its
minimum this way. Grown replicas are kept to the agent pool: a Kubernetes site runs an elastic
job at its minimum (docs/jobs.md). Each function takes or is called under the plane's lock.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from sqlalchemy import Connection, delete

from xpupool.engine.cycle.elastic import ElasticBook, Shrink, grow, shrink_plan
from xpupool.engine.cycle.work import Stopping
from xpupool.engine.gang_sites import within_sites
from xpupool.engine.outcomes import Shrank, render
from xpupool.model.allocation import Allocation
from xpupool.model.request import Request
from xpupool.server import job_lifecycle as lc
from xpupool.server.plane import foreign_use
from xpupool.server.plane.records import HeldJob, PendingJob
from xpupool.server.plane.run_logs import attempt_header, open_replica_log, used_in_run
from xpupool.server.plane.store import allocation_to_dict
from xpupool.server.plane.undone import undone_on_failure
from xpupool.server.schemas.jobs import JobPhase
from xpupool.server.sites.agent_pool import SOURCES, agent_pool
from xpupool.server.storage.job_writes import JobWrites
from xpupool.server.storage.jobs import allocations as t_allocs

if TYPE_CHECKING:
    from xpupool.server.plane.control import ControlPlane

__all__ = ["book_of", "grow_step", "replica_gone", "shrink", "still_shrinking"]


@dataclass(frozen=True, slots=True)
class _Running:
    """A held elastic job as :func:`~xpupool.engine.cycle.elastic.grow` sees it: its replicas
    not being stopped, its request kept to the sites it runs in."""

    id: int
    priority: int
    queue: str
    request: Request
    allocations: list[Allocation]
    stopping: Stopping | None


def _members(job: HeldJob) -> list[Allocation]:
    """``job``'s allocations that stay: those not being stopped by a shrink."""
    return [a for a in job.allocations if a.replica not in job.shrinking]


def book_of(plane: ControlPlane) -> ElasticBook:
    """The extras of the held elastic jobs: every replica from the job's minimum on that is
    not being stopped. Built afresh for each pass (the cycle is rebuilt with the engine, and a
    replica being stopped must not be chosen again)."""
    book = ElasticBook()
    for job in plane.held_elastic():
        assert job.elastic is not None
        for a in _members(job):
            if a.replica >= job.elastic.replicas:
                book.add(job.id, job.elastic.replicas, a, job.elastic.qos)
    return book


def _growable(plane: ControlPlane, job: HeldJob) -> _Running | None:
    """``job`` as :func:`grow` takes it, or None when it does not grow now: not elastic, not
    running, being stopped, or holding a node outside the agent pool (a Kubernetes site runs an
    elastic job at its minimum)."""
    if job.elastic is None or job.state is not JobPhase.RUNNING or job.stop is not None:
        return None
    records = [plane.node(a.node) for a in job.allocations]
    if not records or any(r is None or r.source not in SOURCES for r in records):
        return None
    sites = sorted({r.node.site for r in records if r is not None})
    req = job.elastic
    if len(plane.engine.sites()) > 1:
        req = within_sites(req, sites)
    return _Running(job.id, job.priority, job.queue, req, _members(job), job.stopping)


def grow_step(plane: ControlPlane) -> int:
    """One replica more for each running elastic job below its maximum, where there is room,
    stored and handed out, as one step; returns how many replicas were added. None grows
    while a pending job that had replicas stopped for it was not tried again since (the room
    they left is its own: a pass may end between their report and its next try). A step that
    fails part-way is undone: the store rolls back and memory is read back from it (as a
    scheduling batch is)."""
    return undone_on_failure(plane, _grow)


def _grow(plane: ControlPlane) -> int:
    with plane.locked():  # most passes have no elastic job: no store transaction for them
        if not plane.held_elastic():
            return 0
        if any(p.shrinks for p in plane.queued.values()):
            return 0  # room given back for a pending job is its own until it was tried again
    with plane.write() as conn:
        cycle = plane.cycle
        cycle.elastic = book_of(plane)
        jobs = [w for j in plane.held_elastic() if (w := _growable(plane, j)) is not None]
        if not jobs:
            return 0
        writes = JobWrites()
        added = 0
        for growth in grow(plane.admission, cycle.elastic, jobs):
            job = plane.held_jobs[growth.job]
            rec = plane.node(growth.allocation.node)
            if rec is None or rec.source not in SOURCES:  # not an agent's node: given back
                plane.admission.release(growth.allocation.id)
                continue
            attempt = max(job.attempt, 1)
            replica = max(a.replica for a in job.allocations) + 1
            while used_in_run(plane, job, replica, attempt):  # one a shrink stopped: not again
                replica += 1
            alloc = replace(growth.allocation, replica=replica)
            job.allocations.append(alloc)
            with plane.file_writes():  # after an earlier run's output, if there is one
                header = attempt_header(attempt) if plane.logs.size(job.id, replica) else b""
                open_replica_log(plane, job, replica, attempt, header)
            writes.allocations(
                [
                    {
                        "id": alloc.id,
                        "job_id": job.id,
                        "replica": replica,
                        "node": alloc.node,
                        "queue": job.queue,
                        "flavor": job.flavor,
                        "data": allocation_to_dict(alloc),
                    }
                ]
            )
            why = f"{render(growth.outcome)} (replica {replica} on {alloc.node})"
            plane.apply(conn, job.id, lc.Note(why, sets_reason=False), writes)
            plane.start(job)  # its node's agent is handed the new replica at its next heartbeat
            added += 1
        writes.flush(conn)
        cycle.elastic = book_of(plane)
    return added


def _highest_first(plane: ControlPlane, by: PendingJob, decision: Shrink) -> Shrink:
    """``decision`` with each job's highest-numbered extras preferred: the fewest top extras
    (one per job, then two, ...) whose release lets ``by`` in, so the replicas below keep their
    ranks; ``decision`` itself when only lower extras make room where ``by`` needs it."""
    extras: dict[int, list[Allocation]] = {}
    for job in plane.held_jobs.values():
        if job.elastic is None:
            continue
        own = [a for a in _members(job) if a.replica >= job.elastic.replicas]
        extras[job.id] = sorted(own, key=lambda a: -a.replica)
    deepest = max((len(v) for v in extras.values()), default=0)
    cycle = plane.cycle
    for top in range(1, deepest):
        book = ElasticBook()
        for job_id, own in extras.items():
            minimum = plane.held_jobs[job_id].elastic
            assert minimum is not None
            for a in own[:top]:
                book.add(job_id, minimum.replicas, a, minimum.qos)
        found = shrink_plan(cycle.admission, book, by, decision.outcome.cause)
        if found is not None:
            return found
    return decision


def shrink(
    plane: ControlPlane, conn: Connection, writes: JobWrites, by: PendingJob, decision: Shrink
) -> None:
    """Stop ``decision``'s extra replicas for pending job ``by``: each is marked as being
    stopped (its agent is told at its next heartbeat; one never handed out is told it is not
    running), with an event on its job; ``by`` waits until they are gone."""
    chosen = _highest_first(plane, by, decision)
    by_job: dict[int, list[int]] = {}
    for job_id, alloc in chosen.extras:  # the engine's copy: its replica number is not the job's
        replica = next(a.replica for a in plane.held_jobs[job_id].allocations if a.id == alloc.id)
        by_job.setdefault(job_id, []).append(replica)
    for job_id, replicas in sorted(by_job.items()):
        job = plane.held_jobs[job_id]
        for r in replicas:
            job.shrinking[r] = by.id
            by.shrinks.add((job_id, r))
        left = len(_members(job))
        names = ", ".join(str(r) for r in sorted(replicas))
        why = f"shrinking to {left} replicas: stopping replica(s) {names} (job {by.id} needs room)"
        plane.apply(conn, job_id, lc.Note(why, sets_reason=False), writes)
        agent_pool(plane.sites).stop(job)  # their nodes hear it at their next heartbeat
    plane.cycle.elastic = book_of(plane)


def still_shrinking(plane: ControlPlane, job: PendingJob) -> str | None:
    """Why pending ``job`` is not decided yet: the extra replicas stopped for it that are not
    gone; None when none are (the set is emptied then)."""
    left = sorted(
        (j, r)
        for j, r in job.shrinks
        if (held := plane.held_jobs.get(j)) is not None and held.shrinking.get(r) == job.id
    )
    if not left:
        job.shrinks.clear()
        return None
    jobs = ", ".join(sorted({str(j) for j, _ in left}))
    return f"waiting for {len(left)} extra replica(s) of elastic job(s) {jobs} to stop"


def replica_gone(
    plane: ControlPlane, conn: Connection, job: HeldJob, replica: int, node: str
) -> None:
    """Extra ``replica`` of ``job``, stopped by a shrink, is gone (its agent reported it): its
    cards are freed (engine, quota, store), with an event, and the pending jobs are tried again."""
    by = job.shrinking.pop(replica)
    alloc = next(a for a in job.allocations if a.replica == replica)
    now = plane.clock()
    plane.meter.replica_ended(job.id, job.attempt, replica, now)
    plane.card_idle.released([alloc], now)
    plane.admission.release(alloc.id)
    conn.execute(delete(t_allocs).where(t_allocs.c.id == alloc.id))
    job.allocations = [a for a in job.allocations if a.id != alloc.id]
    job.replica_states.pop(replica, None)  # what was live of it goes with it
    job.exit_codes.pop(replica, None)
    job.failures.pop(replica, None)
    job.ports.pop(replica, None)
    job.limits.pop(replica, None)
    job.handed.discard(replica)
    job.device_memory_used_mib.pop(replica, None)
    minimum = job.elastic.replicas if job.elastic is not None else 1
    shrank = Shrank(job.id, len(_members(job)), minimum, by)
    why = f"{render(shrank)} (replica {replica} on {node} stopped)"
    plane.apply(conn, job.id, lc.Note(why, sets_reason=False))
    plane.advance_drains(conn, {node})
    foreign_use.retry(plane)
    plane.bump()
