"""Limits on jobs in time: a run is stopped once it lasts longer than its ``max_runtime_s`` or
stays idle as long as its ``idle_stop`` says, and
finished jobs are forgotten (row, events, logs) once older than the admin's retention or beyond
each tenant's count, so that a long-running server's database and disk stay bounded. Both run
from the server's watch thread (``app.py``), a pass every half heartbeat; a retention pass reads
only what changed since the one before (:class:`FinishedSweep`)."""

from __future__ import annotations

import logging
from collections import Counter

from sqlalchemy import Connection, func, select

from xpupool.server import job_lifecycle as lc
from xpupool.server.plane import ControlPlane
from xpupool.server.retention import Retention
from xpupool.server.schemas.jobs import FINAL_STATES, StopCause
from xpupool.server.storage.jobs import job_events as t_events
from xpupool.server.storage.jobs import jobs as t_jobs

log = logging.getLogger("xpupool.server")

SWEEP_BATCH = 500
"""Jobs forgotten per pass at most: a first pass over a large old store does not hold the lock
for long; the next passes go on."""
AGE_CHECK_MAX_S = 60.0
"""The longest between two looks for finished jobs past ``--retain-jobs`` (a tenth of it when
that is shorter): a look reads every finished job's last change."""

_FINAL = sorted(p.value for p in FINAL_STATES)


def _beyond_count(
    conn: Connection, jobs: int, chosen: list[int], aged: Counter[str], tenants: list[str] | None
) -> list[int]:
    """The oldest finished jobs (by last change) of each of ``tenants`` (None: every tenant)
    beyond ``jobs`` of its own, not counting those already ``chosen`` (``aged`` of them per
    tenant), at most what is left of :data:`SWEEP_BATCH`. Named tenants are counted on
    ``ix_jobs_tenant_state`` alone, each as far as its own finished jobs."""
    final = t_jobs.c.state.in_(_FINAL)
    over = select(t_jobs.c.tenant, func.count()).where(final)
    if tenants is not None:
        over = over.where(t_jobs.c.tenant.in_(tenants))
    over = over.group_by(t_jobs.c.tenant).having(func.count() > jobs).order_by(t_jobs.c.tenant)
    found: list[int] = []
    for tenant, total in conn.execute(over).all():
        room = SWEEP_BATCH - len(chosen) - len(found)
        if room <= 0:
            break
        excess = min(int(total) - aged[tenant] - jobs, room)
        if excess <= 0:
            continue
        oldest = (
            select(t_jobs.c.id)
            .where(final, t_jobs.c.tenant == tenant, t_jobs.c.id.not_in(chosen))
            .order_by(t_jobs.c.updated_at, t_jobs.c.id)
            .limit(excess)
        )
        found += [int(i) for i in conn.execute(oldest).scalars()]
    return found


def _finished_between(conn: Connection, after: int, upto: int) -> list[str]:
    """The tenants with a job that reached a final state in event ids ``after < id <= upto``:
    every move to a final state writes an event (``ControlPlane.apply``), and only the plane's
    one writer does, so ids are committed in order and none below a mark appears later."""
    rows = conn.execute(
        select(t_jobs.c.tenant)
        .distinct()
        .select_from(t_events.join(t_jobs, t_jobs.c.id == t_events.c.job_id))
        .where(t_events.c.id > after, t_events.c.id <= upto, t_events.c.state.in_(_FINAL))
    )
    return sorted(str(t) for t in rows.scalars())


def stop_overdue(plane: ControlPlane) -> list[int]:
    """Stop every run past its job's ``max_runtime_s`` (cause ``max_runtime``: the job ends
    failed once its processes are gone). Returns the jobs stopped."""
    overdue = plane.runs_past_limit()
    if not overdue:
        return []
    reasons = {
        job_id: f"ran longer than its max_runtime_s ({limit_s:g} s)" for job_id, limit_s in overdue
    }
    stopped = plane.stop_jobs(
        [(job_id, lc.Stop(StopCause.MAX_RUNTIME, reason)) for job_id, reason in reasons.items()]
    )
    for job_id in stopped:
        log.warning("job %d: %s", job_id, reasons[job_id])
    return stopped


def stop_idle(plane: ControlPlane) -> list[int]:
    """Stop every run whose cards stayed idle as long as its ``idle_stop`` asks (cause ``idle``:
    the job ends failed once its processes are gone; ``server/idle_runs.py``). Returns the jobs
    stopped."""
    idle = dict(plane.runs_idle())
    if not idle:
        return []
    stopped = plane.stop_jobs(
        [(job_id, lc.Stop(StopCause.IDLE, why)) for job_id, why in idle.items()]
    )
    for job_id in stopped:
        log.warning("job %d: %s", job_id, idle[job_id])
    return stopped


class FinishedSweep:
    """The retention sweep of one server, with what it remembers between passes so that a pass
    reads what changed, not every finished job (with a count per tenant the store may hold that
    count times the tenants): the tenants with jobs finished since the last pass (job events
    above ``event_mark``) are counted again, and the age limit is looked at every tenth of it,
    at most every :data:`AGE_CHECK_MAX_S`. The reads are made on a connection of their own,
    outside the plane's lock; only the deletion takes it (a final job never moves again, so
    what was read stays true). A new sweep's first pass counts every tenant."""

    def __init__(self, plane: ControlPlane, keep: Retention) -> None:
        self.plane = plane
        self.keep = keep
        self.event_mark: int | None = None  # None: count every tenant
        self.aged_at: float | None = None  # the last age check that left nothing behind

    def sweep(self) -> list[int]:
        """Forget finished jobs older than ``keep.seconds`` (by their last change), then each
        tenant's oldest beyond ``keep.jobs`` of its own, so that no tenant's jobs push out
        another's: their rows and events in one transaction, then their log files. A job that
        is pending or holds devices is never touched; job ids are never handed out again.
        Returns the jobs forgotten."""
        keep, plane = self.keep, self.plane
        now = plane.clock()
        ids: list[int] = []
        aged: Counter[str] = Counter()  # tenant -> its jobs forgotten by age in this pass
        age_due = keep.seconds is not None and (
            self.aged_at is None or now - self.aged_at >= min(AGE_CHECK_MAX_S, keep.seconds / 10)
        )
        mark: int | None = None
        with plane.db.connect() as conn:
            if age_due:
                assert keep.seconds is not None
                old = (
                    select(t_jobs.c.id, t_jobs.c.tenant)
                    .where(t_jobs.c.state.in_(_FINAL), t_jobs.c.updated_at < now - keep.seconds)
                    .order_by(t_jobs.c.id)
                    .limit(SWEEP_BATCH)
                )
                for job_id, tenant in conn.execute(old):
                    ids.append(int(job_id))
                    aged[tenant] += 1
            if keep.jobs is not None and len(ids) < SWEEP_BATCH:
                mark = int(conn.execute(select(func.max(t_events.c.id))).scalar() or 0)
                tenants = (
                    None
                    if self.event_mark is None
                    else _finished_between(conn, self.event_mark, mark)
                )
                if tenants != []:
                    ids += _beyond_count(conn, keep.jobs, ids, aged, tenants)
        if ids:
            plane.forget_jobs(ids)
            for job_id in ids:  # after the commit: a crash before this leaves files no row names
                plane.logs.forget(job_id)
            log.info("retention: %d finished jobs forgotten (%s..%s)", len(ids), min(ids), max(ids))
        if len(ids) < SWEEP_BATCH:  # a full batch: the next pass goes on from the same marks
            if age_due:
                self.aged_at = now
            if mark is not None:
                self.event_mark = mark
        return ids


def sweep_finished(plane: ControlPlane, keep: Retention) -> list[int]:
    """One pass of a new :class:`FinishedSweep`: every tenant counted, the age looked at."""
    return FinishedSweep(plane, keep).sweep()
