"""The scheduling loop: run the engine's scheduling cycle over the pending jobs and record what it
decides.

One pass takes the pending jobs that could have become placeable since they last failed (at most
``RETRIES_PER_TENANT`` retries per tenant, so one tenant's queue does not set everyone's pace: the
plane's retry gate, ``engine/cycle/retry_gate.py``, which the timed simulator holds too). The
cycle (``engine/cycle/``) orders them by dominant resource fairness, then priority, then age, and
decides each: placed, waiting (with the reason), or preempting lower-priority jobs. Jobs that do not
fit are skipped, not waited on (Kueue's BestEffortFIFO), so a large job never blocks small ones
behind it; a job exactly like one refused earlier in the pass is refused without a second try while
nothing was released. This loop persists the decisions: allocations and states in the store,
victims stopped through their agents and requeued, the preemptor placed once their devices are free.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Generator

from sqlalchemy import Connection

from xpupool.engine.cycle.admission import Admitted
from xpupool.engine.cycle.cycle import Place, Preempt, Wait
from xpupool.engine.cycle.retry_gate import PERIODIC_PASS_S, RETRIES_PER_TENANT
from xpupool.engine.cycle.stop_cost import describe, lost_card_s
from xpupool.engine.outcomes import (
    INADMISSIBLE,
    CannotSchedule,
    Preempted,
    PreemptedByPriority,
    PreemptedByReclaim,
    render,
)
from xpupool.model.errors import Unavailable
from xpupool.server import job_lifecycle as lc
from xpupool.server import job_sites, rehearsal
from xpupool.server.job_checkpoints import stop_cost_of
from xpupool.server.plane import ControlPlane, HeldJob, PendingJob, allocation_to_dict, foreign_use
from xpupool.server.schemas.jobs import JobPhase, StopCause
from xpupool.server.speed_note import speed_note
from xpupool.server.storage.job_writes import JobWrites
from xpupool.server.throughput_knowledge import fill_speeds

log = logging.getLogger("xpupool.scheduler")
__all__ = [
    "BATCH_JOBS",
    "BATCH_S",
    "RETRIES_PER_TENANT",  # the gate's, named here as the pass's cap it is
    "YIELD_S",
    "pass_steps",
    "run_passes",
    "schedule_pass",
]

BATCH_JOBS = 32
"""Jobs tried in one batch at most: one lock hold and one store transaction (see ``_batch``)."""
BATCH_S = 0.005
"""Seconds a batch goes on taking jobs: what a submission may wait behind it, at most about."""
YIELD_S = 0.002
"""Seconds a pass waits at most, between two batches, for the writes waiting for the lock."""


def schedule_pass(plane: ControlPlane) -> int:
    """One pass, run to its end in the calling thread; returns how many jobs were placed.
    Thread-safe. Between two batches it lets in the writes waiting for the lock
    (``_let_writers_in``). Tests and tools call it; the server runs the same pass on its event
    loop (``run_passes``)."""
    steps = pass_steps(plane)
    while True:
        try:
            next(steps)
        except StopIteration as done:
            placed: int = done.value
            return placed
        _let_writers_in(plane)


def pass_steps(plane: ControlPlane) -> Generator[None, None, int]:
    """One pass, a batch per step: it yields between two batches and returns how many jobs
    were placed.

    The jobs are tried in batches (``_batch``): the plane's lock is held for one batch, not for
    the whole pass, so a pass over many pending jobs (one tenant's flood of gangs that never
    fit) does not make every submission, heartbeat and cancel wait for all of them (issue 18,
    bench/tenant_flood.py), and each batch is one store transaction, not one per job (issue 25).
    A job placed, cancelled or requeued while the pass ran is skipped. The online workload the
    engine learns from the jobs it is asked to place is learned again, when due, once the pass
    is done, and preferably when no job arrived meanwhile (``_relearn``)."""
    with plane.locked():
        choice = plane.retry_gate.choose(plane.queued.values(), plane.clock())
        candidates = choice.jobs
        if not candidates:
            _relearn(plane, arrived=False)
            return 0
        fill_speeds(plane.throughput, plane.engine, candidates)
        next_job = plane.next_job_id
        started = time.perf_counter()
        cycle = plane.cycle
        cycle.begin_pass()
        order = cycle.order(candidates)
    placed = 0
    k = 0
    while k < len(order):
        done, k = _batch(plane, candidates, order, k)
        placed += done
        yield
    with plane.locked():  # once per pass, not in the middle of a batch of placements
        _relearn(plane, arrived=plane.next_job_id != next_job)
    plane.notify("pass", time.perf_counter() - started)
    if choice.again_at_once(placed):  # retries left out while some fitted: a backlog to go on with
        plane.wake.set()
    return placed


async def run_passes(plane: ControlPlane, period_s: float = PERIODIC_PASS_S) -> None:
    """The server's scheduling loop, on the event loop that serves the API: a pass whenever
    woken (a submission, a release, a node change) and every ``period_s``, until cancelled.

    Why not a thread: the API and the passes both run Python, and two busy threads of one
    interpreter take turns at the GIL, and at the server's limit the handovers cost about as much
    CPU as the work (issue 25; docs/benchmarks.md and its history). Between two batches of a
    pass the loop serves what came meanwhile, so a submission waits for one batch (``BATCH_S``)
    at most, as it did for the lock. A cancel lands between two batches, never inside one.

    Numba compiles a loop on its first call and holds its compiler's lock meanwhile: a pass that
    called a loop still compiling (a first start, or a loop's source changed) would wait there,
    seconds of CPU, tens on a loaded machine, and the event loop with it, serving nothing, not even
    ``/healthz`` (issue 42). So until every loop a placement calls is loaded
    (``rehearsal.py``), the passes wait for that on a thread."""
    while True:
        await plane.wake.wait(period_s)
        try:
            running = rehearsal.plane_profiles(plane)  # a queue's may change
            if not rehearsal.ready(running):
                await asyncio.to_thread(rehearsal.warm, running, plane.profiles)
            for _ in pass_steps(plane):
                await _serve_between_batches(plane)
        except Unavailable:
            pass  # the store cannot be written: said once by the plane's health
        except Exception:
            log.exception("scheduling pass failed")


async def _serve_between_batches(plane: ControlPlane) -> None:
    """Let the event loop serve the requests that came during a batch, and let the writers of
    other threads (the agent inside ``up``, the lost-node watch) that wait for the lock in
    first: this loop takes the lock again at once otherwise, and the lock is not fair."""
    await asyncio.sleep(0)
    if plane.writers_waiting:  # they are threads: wait for them off the loop
        await asyncio.to_thread(plane.wait_for_writers, YIELD_S)


def _relearn(plane: ControlPlane, arrived: bool) -> None:
    """Re-learn the engine's online workload if that is due, paced by the plane's
    ``learning_pace`` (``engine/learning_pace.py``: at most once a second, not after a pass during
    which a job ``arrived`` (the next pass is about to place it), for half a second at most).
    A re-learn is a pass over every node, and the jobs that come meanwhile wait for it:
    re-learning after every pass that made it due set the submission -> scheduled p99 on a large
    pool (issue 25; docs/benchmarks.md and its history)."""
    plane.learning_pace.tick(plane.engine, plane.clock(), arrived)


def _let_writers_in(plane: ControlPlane) -> None:
    """Wait (``YIELD_S`` at most) until no thread waits to write: the lock is not fair, and a
    pass that took it again at once after each batch would keep submissions waiting for all of
    its batches, not one (issue 25)."""
    plane.wait_for_writers(YIELD_S)


def _batch(
    plane: ControlPlane, candidates: list[PendingJob], order: list[int], k: int
) -> tuple[int, int]:
    """Try the jobs ``order[k:]`` under one hold of the lock and in one store transaction, until
    ``BATCH_JOBS`` were tried or ``BATCH_S`` went by; returns (placed, the next index).

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
    deadline = time.perf_counter() + BATCH_S
    end = min(len(order), k + BATCH_JOBS)
    try:
        with plane.write() as conn:  # a failed write raises Unavailable with memory reloaded
            writes = JobWrites()
            while k < end:
                job = candidates[order[k]]
                k += 1
                if plane.queued.get(job.id) is not job or plane.retry_gate.tried_now(job):
                    continue
                if _try_admit(plane, conn, writes, job):
                    placed += 1
                if time.perf_counter() > deadline:
                    break
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
    job.waiting_on = set(decision.waiting_on) if isinstance(decision, Wait) else set()
    if isinstance(decision, Preempt):
        writes.flush(conn)  # the stops read the victims' rows
        _preempt(
            plane, conn, job, [plane.held_jobs[v.id] for v in decision.victims], decision.reclaim
        )
    # cards held by pods that are no job of the plane's are named (plane/foreign_use.py)
    reason = render(decision.outcome) + foreign_use.note(plane, decision.outcome)
    _still_pending(plane, writes, job, gen, reason)
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
        attempt=job.attempts,
        min_run_s=job.request.min_run_s,
        idle_stop=job.request.idle_stop,
        kind=job.request.kind,
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
    sites = sorted({r.node.site for r in map(plane.node, nodes) if r is not None})
    if len(sites) > 1:  # a job that may span sites: what its replicas talk over (issue 51)
        where += f"; across sites {', '.join(sites)}: {plane.site_network.span_text(sites)}"
    plane.apply(conn, job.id, lc.Schedule(where), writes, flavor=outcome.flavor)
    plane.start(held)  # the sites of its nodes run it (server/sites/)
    plane.notify("scheduled", plane.clock() - job.created_at)


def _preempt(
    plane: ControlPlane, conn: Connection, by: PendingJob, victims: list[HeldJob], reclaim: bool
) -> None:
    """Stop ``victims`` for ``by``: released at once what runs nowhere yet, else agents are asked
    to stop them (the stop is stored first) and ``by`` waits for them."""
    for victim in victims:
        why: Preempted = (
            PreemptedByReclaim(by.id, by.queue)
            if reclaim
            else PreemptedByPriority(by.id, by.priority, victim.priority)
        )
        cost = stop_cost_of(plane.held_jobs, plane.clock(), victim.id)  # why it: what it loses
        reason = f"{render(why)}; {describe(cost, lost_card_s(cost, victim.allocations))}"
        may_run = victim.may_run
        plane.apply(conn, victim.id, lc.Stop(StopCause.PREEMPTED, reason))
        if may_run:
            by.waiting_on.add(victim.id)
