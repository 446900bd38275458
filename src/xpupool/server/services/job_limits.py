"""Limits on jobs in time: a run is stopped once it lasts longer than its ``max_runtime_s``, and
finished jobs are forgotten (row, events, logs) once older than the admin's retention or beyond
its count, so that a long-running server's database and disk stay bounded. Both run from the
server's watch thread (``app.py``), a pass every half heartbeat; each pass is one indexed query
when there is nothing to do."""

from __future__ import annotations

import logging

from sqlalchemy import func, select

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
    """Forget finished jobs older than ``keep.seconds`` (by their last change), then the oldest
    beyond ``keep.jobs``: their rows and events in one transaction, then their log files. A job
    that is pending or holds devices is never touched; job ids are never handed out again.
    Returns the jobs forgotten."""
    now = plane.clock()
    final = t_jobs.c.state.in_(_FINAL)
    with plane.write() as conn:
        ids: list[int] = []
        if keep.seconds is not None:
            old = (
                select(t_jobs.c.id)
                .where(final, t_jobs.c.updated_at < now - keep.seconds)
                .order_by(t_jobs.c.id)
                .limit(SWEEP_BATCH)
            )
            ids = [int(i) for i in conn.execute(old).scalars()]
        if keep.jobs is not None and len(ids) < SWEEP_BATCH:
            total = int(
                conn.execute(select(func.count()).select_from(t_jobs).where(final)).scalar_one()
            )
            excess = total - len(ids) - keep.jobs
            if excess > 0:
                oldest = (
                    select(t_jobs.c.id)
                    .where(final, t_jobs.c.id.not_in(ids))
                    .order_by(t_jobs.c.updated_at, t_jobs.c.id)
                    .limit(min(excess, SWEEP_BATCH - len(ids)))
                )
                ids += [int(i) for i in conn.execute(oldest).scalars()]
        if not ids:
            return []
        plane.forget_jobs(conn, ids)
    for job_id in ids:  # after the commit: a crash before this leaves files no row names
        plane.logs.forget(job_id)
    log.info("retention: %d finished jobs forgotten (%s..%s)", len(ids), min(ids), max(ids))
    return ids
