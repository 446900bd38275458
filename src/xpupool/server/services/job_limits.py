"""Limits on jobs in time: a run is stopped once it lasts longer than its ``max_runtime_s``, and
finished jobs are forgotten (row, events, logs) once older than the admin's retention or beyond
each tenant's count, so that a long-running server's database and disk stay bounded. Both run
from the server's watch thread (``app.py``), a pass every half heartbeat; each pass is one
indexed query when there is nothing to do."""

from __future__ import annotations

import logging
import shutil
from collections import Counter

from sqlalchemy import Connection, func, select

from xpupool.server import job_lifecycle as lc
from xpupool.server import schemas as s
from xpupool.server.plane import ControlPlane
from xpupool.server.retention import Retention
from xpupool.server.schemas import StopCause
from xpupool.server.storage.jobs import jobs as t_jobs

log = logging.getLogger("xpupool.server")

SWEEP_BATCH = 500
"""Jobs forgotten per pass at most: a first pass over a large old store does not hold the lock
for long; the next passes go on."""

_FINAL = sorted(p.value for p in s.FINAL_STATES)


def _beyond_count(conn: Connection, jobs: int, chosen: list[int], aged: Counter[str]) -> list[int]:
    """Each tenant's oldest finished jobs (by last change) beyond ``jobs`` of its own, not
    counting those already ``chosen`` (``aged`` of them per tenant), at most what is left of
    :data:`SWEEP_BATCH`; one grouped query on ``ix_jobs_tenant_state`` when none is over."""
    final = t_jobs.c.state.in_(_FINAL)
    over = (
        select(t_jobs.c.tenant, func.count())
        .where(final)
        .group_by(t_jobs.c.tenant)
        .having(func.count() > jobs)
        .order_by(t_jobs.c.tenant)
    )
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


def stop_overdue(plane: ControlPlane) -> list[int]:
    """Stop every run past its job's ``max_runtime_s`` (cause ``max_runtime``: the job ends
    failed once its processes are gone). Returns the jobs stopped."""
    overdue = plane.runs_past_limit()
    if not overdue:
        return []
    stopped = []
    with plane.write() as conn:
        for job_id, limit_s in overdue:
            reason = f"ran longer than its max_runtime_s ({limit_s:g} s)"
            try:
                plane.apply(conn, job_id, lc.Stop(StopCause.MAX_RUNTIME, reason))
            except lc.IllegalTransition:
                continue  # it ended between the look and the lock
            stopped.append(job_id)
            log.warning("job %d: %s", job_id, reason)
    return stopped


def sweep_finished(plane: ControlPlane, keep: Retention) -> list[int]:
    """Forget finished jobs older than ``keep.seconds`` (by their last change), then each
    tenant's oldest beyond ``keep.jobs`` of its own, so that no tenant's jobs push out
    another's: their rows and events in one transaction, then their log files. A job that is
    pending or holds devices is never touched; job ids are never handed out again.
    Returns the jobs forgotten."""
    now = plane.clock()
    final = t_jobs.c.state.in_(_FINAL)
    with plane.write() as conn:
        ids: list[int] = []
        aged: Counter[str] = Counter()  # tenant -> its jobs forgotten by age in this pass
        if keep.seconds is not None:
            old = (
                select(t_jobs.c.id, t_jobs.c.tenant)
                .where(final, t_jobs.c.updated_at < now - keep.seconds)
                .order_by(t_jobs.c.id)
                .limit(SWEEP_BATCH)
            )
            for job_id, tenant in conn.execute(old):
                ids.append(int(job_id))
                aged[tenant] += 1
        if keep.jobs is not None and len(ids) < SWEEP_BATCH:
            ids += _beyond_count(conn, keep.jobs, ids, aged)
        if not ids:
            return []
        plane.forget_jobs(conn, ids)
    for job_id in ids:  # after the commit: a crash before this leaves files no row names
        shutil.rmtree(plane.logs_dir / str(job_id), ignore_errors=True)
    log.info("retention: %d finished jobs forgotten (%s..%s)", len(ids), min(ids), max(ids))
    return ids
