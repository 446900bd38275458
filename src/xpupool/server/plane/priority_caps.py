"""Queued priorities brought down to their queue's cap, as the plane's operation: the pending jobs
above their queue's ``max_priority`` are read from the store and changed there and in the plane's
queue in the caller's transaction, under the plane's lock (a lowered cap, ``services/tenants.py``;
jobs an older release queued before there was a cap, on start: ``stored_job_settling.py``).
``services/grants.py`` names it among the grants.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from sqlalchemy import Connection, select, update

from xpupool.engine.cycle.retry_gate import NEVER_TRIED
from xpupool.server import job_lifecycle as lc
from xpupool.server.schemas.jobs import JobPhase
from xpupool.server.storage.jobs import jobs as t_jobs
from xpupool.server.storage.tenants import queues as t_queues

if TYPE_CHECKING:
    from xpupool.server.plane.control import ControlPlane

__all__ = ["cap_queued"]


def cap_queued(plane: ControlPlane, conn: Connection, queue: str | None = None) -> list[int]:
    """Bring pending jobs above their queue's cap down to it, in the store (with an event) and in
    the plane; ``queue`` None: every queue (on start: jobs an older release queued before there
    was a cap). Jobs already holding devices keep their priority until they leave. Returns the
    jobs changed. Call under the plane's lock."""
    q = (
        select(t_jobs.c.id, t_jobs.c.priority, t_queues.c.max_priority)
        .select_from(t_jobs.join(t_queues, t_jobs.c.queue == t_queues.c.name))
        .where(
            t_jobs.c.state == JobPhase.PENDING.value,
            t_jobs.c.priority > t_queues.c.max_priority,
        )
    )
    if queue is not None:
        q = q.where(t_jobs.c.queue == queue)
    changed: list[int] = []
    for row in conn.execute(q).all():
        cap = int(row.max_priority)
        conn.execute(update(t_jobs).where(t_jobs.c.id == row.id).values(priority=cap))
        reason = f"priority {row.priority} lowered to its queue's max_priority {cap}"
        plane.apply(conn, row.id, lc.Note(reason, sets_reason=False))
        job = plane.queued.get(row.id)
        if job is not None:
            job.priority = cap
            job.request = replace(job.request, priority=cap)
            job.asked = replace(job.asked, priority=cap)  # as asked, kept to no site (issue 51)
            job.tried = NEVER_TRIED  # tried again in the next pass, as a new job is
        changed.append(int(row.id))
    return changed
