"""A scheduling pass's steps, as the plane's operations: its beginning (which jobs it tries, in
which order), each batch of placements, and its end (the engine's re-learning, when due). Each
takes the plane's lock itself, so what it reads (the queue, the retry gate, the held jobs, the
engine) is one state and what it decides is written, in memory and in the store, as one step.
``server/scheduler_loop.py`` paces them: it runs a pass's steps on the event loop and lets the
waiting writers in between two batches; nothing outside the package takes the lock (``lock.py``).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlalchemy import Connection

from xpupool.engine.cycle.admission import Admitted
from xpupool.engine.cycle.cycle import Place, Preempt, Wait
from xpupool.engine.cycle.elastic import Shrink
from xpupool.engine.cycle.recutting import Recutting
from xpupool.engine.cycle.retry_gate import NEVER_TRIED, PassChoice
from xpupool.engine.cycle.stop_cost import describe, lost_card_s
from xpupool.engine.outcomes import (
    INADMISSIBLE,
    CannotSchedule,
    MovedToDefragment,
    Preempted,
    PreemptedByPriority,
    PreemptedByReclaim,
    render,
)
from xpupool.model.errors import Unavailable
from xpupool.server import job_lifecycle as lc
from xpupool.server import job_sites
from xpupool.server.job_checkpoints import stop_cost_of
from xpupool.server.plane import (
    auto_recut,
    defrag_moves,
    elastic_runs,
    faster_moves,
    foreign_use,
    reservation_rows,
)
from xpupool.server.plane.records import HeldJob, PendingJob
from xpupool.server.plane.store import allocation_to_dict
from xpupool.server.schemas.jobs import JobPhase, StopCause
from xpupool.server.speed_note import speed_note
from xpupool.server.storage.job_writes import JobWrites
from xpupool.server.throughput_knowledge import fill_speeds

if TYPE_CHECKING:
    from xpupool.server.plane.control import ControlPlane

log = logging.getLogger("xpupool.scheduler")
__all__ = ["PassStart", "batch", "begin", "end"]


@dataclass(frozen=True, slots=True)
class PassStart:
    """What a pass decided when it began: the jobs it tries (``choice.jobs``), their order, the
    next job id then (a job arrived during the pass when it moved) and when it began
    (``time.perf_counter``)."""

    choice: PassChoice[PendingJob]
    order: list[int]
    next_job: int
    started: float


def begin(plane: ControlPlane) -> PassStart | None:
    """The jobs a pass tries and their order, read from one state of the queue and the retry
    gate, with the cycle's pass begun in the same step; None when there is none to try (the
    engine then re-learns, when due, as at the end of a pass)."""
    with plane.locked():
        choice = plane.retry_gate.choose(plane.queued.values(), plane.clock())
        candidates = choice.jobs
        if not candidates:
            _relearn(plane, arrived=False)
            return None
        fill_speeds(plane.throughput, plane.engine, candidates)
        next_job = plane.next_job_id
        started = time.perf_counter()
        cycle = plane.cycle
        cycle.elastic = elastic_runs.book_of(plane)  # elastic jobs' extras, as stored
        cycle.begin_pass()
        order = cycle.order(candidates)
    return PassStart(choice, order, next_job, started)


def end(plane: ControlPlane, start: PassStart) -> None:
    """A pass's end: the engine re-learns its online workload, when due, once per pass (not in
    the middle of a batch of placements), told whether a job arrived since ``start``."""
    with plane.locked():
        _relearn(plane, arrived=plane.next_job_id != start.next_job)


def _relearn(plane: ControlPlane, arrived: bool) -> None:
    """Re-learn the engine's online workload if that is due, paced by the plane's
    ``learning_pace`` (``engine/learning_pace.py``: at most once a second, not after a pass during
    which a job ``arrived`` (the next pass is about to place it), for half a second at most).
    A re-learn is a pass over every node, and the jobs that come meanwhile wait for it:
    re-learning after every pass that made it due set the submission -> scheduled p99 on a large
    pool (issue 25; docs/benchmarks.md and its history)."""
    plane.learning_pace.tick(plane.engine, plane.clock(), arrived)


def batch(
    plane: ControlPlane,
    candidates: list[PendingJob],
    order: list[int],
    k: int,
    max_jobs: int,
    max_s: float,
) -> tuple[int, int]:
    """Try the jobs ``order[k:]`` under one hold of the lock and in one store transaction, until
    ``max_jobs`` were tried or ``max_s`` went by (the loop's ``BATCH_JOBS``, ``BATCH_S``);
    returns (placed, the next index). It reads the queue, the retry gate, the held jobs and the
    engine as one state, and changes them with the store as one step.

    Why committing several placements at once weakens nothing: a placement is re-derivable
    (the job stays pending in the store until its batch commits, and a server that restarts
    places it again from there), and nothing outside this thread sees it before the commit:
    memory (engine, held and pending jobs) changes under the lock, which is let go only after
    the commit, and every reader, the API, the agents and the metrics, reads under that lock or
    from the store. A crash before the commit loses the whole batch's placements and nothing
    else: no client was answered about them, no agent was handed them. A submission is not
    in a batch: it is committed before its 201 (services/jobs.py). A batch whose write fails
    undoes itself: the store rolls back and memory is read back from it (``plane.write`` for
    the store's own failures, here for any other)."""
    placed = 0
    deadline = time.perf_counter() + max_s
    end = min(len(order), k + max_jobs)
    try:
        with plane.write() as conn:  # a failed write raises Unavailable with memory reloaded
            writes = JobWrites()
            cycle = plane.cycle
            cycle.recuts = auto_recut.PlaneRecuts(plane, conn)  # re-cuts, for this batch only
            try:
                while k < end:
                    job = candidates[order[k]]
                    k += 1
                    if plane.queued.get(job.id) is not job or plane.retry_gate.tried_now(job):
                        continue
                    if _try_admit(plane, conn, writes, job):
                        placed += 1
                    if time.perf_counter() > deadline:
                        break
            finally:
                cycle.recuts = None
            writes.flush(conn)
    except Unavailable:
        raise
    except Exception:  # rolled back: memory may be ahead of the store, so it is read back
        with plane.locked():
            plane.reload()
        raise
    return placed, k


def _try_admit(plane: ControlPlane, conn: Connection, writes: JobWrites, job: PendingJob) -> bool:
    """Carry out the cycle's decision for ``job``: record a placement, preempt, or note why not.
    The batch's job rows, events and allocations are kept in ``writes`` and written together
    (``storage/job_writes.py``)."""
    gen = plane.retry_gate.generation
    offer = plane.cycle.recuts
    if isinstance(offer, auto_recut.PlaneRecuts):
        offer.fresh()
    shrinking = elastic_runs.still_shrinking(plane, job)  # replicas stopped for it, not gone
    if shrinking is not None:
        _still_pending(plane, writes, job, gen, shrinking)
        return False
    if defrag_moves.yields(plane, job):  # moved for a job not tried since: that one goes first
        return False
    kept = faster_moves.target(plane, job)  # moved to faster cards: placed on those kept for it
    if kept is not None:
        _record_placement(plane, conn, writes, job, kept)
        return True
    try:
        job_sites.dispatch(plane, writes, job)  # its site first, where several are open to it
        decision = plane.cycle.decide(job, plane.held_jobs)
    except Exception as exc:  # a request the engine rejects outright stays pending with the reason
        log.exception("job %d: admission failed", job.id)
        _still_pending(plane, writes, job, gen, render(CannotSchedule(str(exc))))
        return False
    if isinstance(decision, Place):
        _record_placement(plane, conn, writes, job, decision.admitted)
        return True
    outcome = decision.outcome
    if isinstance(decision, Recutting) and decision.new:  # the cycle proposes re-cuts for it
        if auto_recut.carry_out(plane, conn, job.id, decision):
            why = render(outcome)  # "...; re-cutting CARD on NODE to LAYOUT for this job"
            state = JobPhase.PENDING.value
            writes.event({"job_id": job.id, "at": plane.clock(), "state": state, "reason": why})
        else:
            outcome = decision.outcome.cause
    job.waiting_on = set(decision.waiting_on) if isinstance(decision, Wait) else set()
    if isinstance(decision, Shrink):  # elastic jobs' extra replicas stop first
        elastic_runs.shrink(plane, conn, writes, job, decision)
    if isinstance(decision, Preempt):
        writes.flush(conn)  # the stops read the victims' rows
        _preempt(plane, conn, job, [plane.held_jobs[v.id] for v in decision.victims], decision)
        if decision.moves:  # the job's own history says which jobs move for it
            why = render(outcome)  # "...; moving job(s) [N] to defragment"
            state = JobPhase.PENDING.value
            writes.event({"job_id": job.id, "at": plane.clock(), "state": state, "reason": why})
    # cards held by pods that are no job of the plane's are named (plane/foreign_use.py)
    reason = render(outcome) + foreign_use.note(plane, outcome)
    if not isinstance(decision, Recutting):  # cards at rest after failed re-cuts are named
        reason += auto_recut.note(offer, job.request)
    _still_pending(plane, writes, job, gen, reason)
    ripe = offer.ripe_at if isinstance(offer, auto_recut.PlaneRecuts) else None
    if ripe is not None and not isinstance(decision, Recutting):
        job.tried, job.not_before = NEVER_TRIED, ripe  # a card may be re-cut for it then
    return False


def _still_pending(
    plane: ControlPlane, writes: JobWrites, job: PendingJob, gen: int, reason: str
) -> None:
    """``job`` waits for ``reason`` (rendered: job reasons are stored as text). A wait's reason
    changes from pass to pass without an event (what is free moves all the time); becoming
    inadmissible, or admissible again after a quota change, is an event of the job's history: it
    says the wait has changed its nature. The stored reason before it may be a row read back
    from the store, so both sides are told by the text's ``INADMISSIBLE`` prefix."""
    plane.retry_gate.failed(job, gen)
    if reason != job.reason:
        if reason.startswith(INADMISSIBLE) != job.reason.startswith(INADMISSIBLE):
            state = JobPhase.PENDING.value
            writes.event({"job_id": job.id, "at": plane.clock(), "state": state, "reason": reason})
        job.reason = reason
        writes.update(job.id, {"reason": reason})


def _record_placement(
    plane: ControlPlane, conn: Connection, writes: JobWrites, job: PendingJob, outcome: Admitted
) -> None:
    allocs = list(outcome.placement.allocations)
    note = speed_note(plane.engine, job.request, allocs, job.known_speeds)
    plane.apply(
        conn, job.id, lc.Admit(f"queue {job.queue}, flavour {outcome.flavor}{note}"), writes
    )
    held = HeldJob(
        job.id,
        job.tenant,
        job.queue,
        outcome.flavor,
        job.priority,
        JobPhase.ADMITTED,
        allocs,
        max_runtime_s=job.max_runtime_s,
        reservation=job.reservation,
        preemptible=job.preemptible,
        attempt=job.attempts,
        min_run_s=job.request.min_run_s,
        idle_stop=job.request.idle_stop,
        kind=job.request.kind,
        elastic=job.request if job.request.max_replicas is not None else None,
        movable=defrag_moves.movable(plane, conn, job),
    )
    plane.hold(held)
    writes.allocations(
        [
            {
                "id": a.id,
                "job_id": job.id,
                "replica": a.replica,
                "node": a.node,
                "queue": job.queue,
                "flavor": outcome.flavor,
                "data": allocation_to_dict(a),
            }
            for a in allocs
        ],
    )
    nodes = sorted({a.node for a in allocs})
    where = f"on {', '.join(nodes)}"
    where += reservation_rows.placement_note(plane, job.reservation, allocs)
    sites = sorted({r.node.site for r in map(plane.node, nodes) if r is not None})
    if len(sites) > 1:  # a job that may span sites: what its replicas talk over (issue 51)
        where += f"; across sites {', '.join(sites)}: {plane.site_network.span_text(sites)}"
    plane.apply(conn, job.id, lc.Schedule(where), writes, flavor=outcome.flavor)
    plane.start(held)  # the sites of its nodes run it (server/sites/)
    plane.notify("scheduled", plane.clock() - job.created_at)


def _preempt(
    plane: ControlPlane, conn: Connection, by: PendingJob, victims: list[HeldJob], how: Preempt
) -> None:
    """Stop ``victims`` for ``by``: released at once what runs nowhere yet, else agents are asked
    to stop them (the stop is stored first) and ``by`` waits for them. A move to defragment
    (``how.moves``) is such a stop, with its own reason, counted in the disruption budget's
    ledger (``defrag_moves.py``). The instances a re-cut destroys (``how.recut_freed``) may
    be re-cut as soon as they are free (``card_idle.py``)."""
    plane.card_idle.freed_for_recut(how.recut_freed)
    for victim in victims:
        why: Preempted
        if how.moves:
            why = MovedToDefragment(by.id)
        elif how.reclaim:
            why = PreemptedByReclaim(by.id, by.queue)
        else:
            why = PreemptedByPriority(by.id, by.priority, victim.priority)
        cost = stop_cost_of(plane.held_jobs, plane.clock(), victim.id)  # why it: what it loses
        lost = lost_card_s(cost, victim.allocations)
        reason = f"{render(why)}; {describe(cost, lost)}"
        may_run = victim.may_run
        plane.apply(conn, victim.id, lc.Stop(StopCause.PREEMPTED, reason))
        if how.moves:
            defrag_moves.record(plane, conn, victim, by.id, lost)
        if may_run:
            by.waiting_on.add(victim.id)
