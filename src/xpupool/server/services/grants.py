"""What the admin grants: the highest priority a queue's jobs may ask for, and how much queued
work a tenant may hold. Both are checked on submission, under the plane's lock and before
anything is stored, so a refusal changes nothing.

Priority is what lets a job preempt another, so it is not the submitter's to choose: a queue's
``max_priority`` (default 0, the default priority) caps it, and a job above the cap is 403. Queued
work is what one tenant can make every other wait for (each pending job is tried again whenever
capacity frees, under the lock submissions take), so a tenant's pending jobs, the replicas of one
job and the replicas of all its pending jobs are limited (``TenantIn``); over a count limit is
429 (it passes once some of the tenant's work has started), over the per-job limit 403. The same
row carries what the tenant's job logs may take on the server (:func:`log_caps`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import Connection, bindparam, select

from xpupool.model.errors import NotGranted, OverLimit
from xpupool.server.job_logs import LogCaps
from xpupool.server.plane import ControlPlane
from xpupool.server.plane.priority_caps import cap_queued as cap_queued
from xpupool.server.storage.tenants import queues as t_queues
from xpupool.server.storage.tenants import tenants as t_tenants

# built once (building a statement costs more than running it; this runs on every submission)
_GRANTS = (
    select(
        t_queues.c.max_priority,
        t_tenants.c.max_pending_jobs,
        t_tenants.c.max_replicas_per_job,
        t_tenants.c.max_pending_replicas,
        t_tenants.c.max_job_log_mib,
        t_tenants.c.max_log_mib,
    )
    .select_from(t_queues.join(t_tenants, t_queues.c.tenant == t_tenants.c.name))
    .where(t_queues.c.name == bindparam("queue"))
)


def check_submission(
    plane: ControlPlane,
    conn: Connection,
    *,
    tenant: str,
    queue: str,
    priority: int,
    priority_field: Callable[[], str],
    replicas: int,
) -> None:
    """Raise :class:`NotGranted` (403) or :class:`OverLimit` (429) when a job of ``replicas``
    at ``priority`` may not join ``queue`` of ``tenant`` now; ``priority_field()`` names where
    the priority came from (asked only for the error). Call under the plane's lock, in the
    transaction that stores the job."""
    row = _grant_row(plane, conn, queue)
    if priority > row.max_priority:
        raise NotGranted(
            priority_field(),
            priority,
            f"queue {queue!r} takes priorities up to {row.max_priority}; the admin may raise its "
            "max_priority",
        )
    if replicas > row.max_replicas_per_job:
        raise NotGranted(
            "replicas",
            replicas,
            f"tenant {tenant!r} may ask for at most {row.max_replicas_per_job} replicas per job "
            "(max_replicas_per_job, set by the admin)",
        )
    jobs, pending_replicas = plane.queued_tally(tenant)
    if jobs + 1 > row.max_pending_jobs:
        raise OverLimit(
            "tenant",
            tenant,
            f"tenant {tenant!r} has {jobs} pending jobs, its limit (max_pending_jobs) is "
            f"{row.max_pending_jobs}: submit again once some have started or been cancelled",
        )
    if pending_replicas + replicas > row.max_pending_replicas:
        raise OverLimit(
            "replicas",
            replicas,
            f"tenant {tenant!r} has {pending_replicas} pending replicas, its limit "
            f"(max_pending_replicas) is {row.max_pending_replicas}: {replicas} more would pass it",
        )


def _grant_row(plane: ControlPlane, conn: Connection | None, queue: str) -> Any:
    """The queue's and its tenant's limits, read once per queue until tenants or queues change
    (``plane.forget_grants``); ``conn`` None: on a connection of its own."""
    row = plane.grant_row(queue)
    if row is None:
        if conn is None:
            with plane.db.connect() as own:
                row = own.execute(_GRANTS, {"queue": queue}).one()
        else:
            row = conn.execute(_GRANTS, {"queue": queue}).one()
        plane.keep_grant_row(queue, row)
    return row


def log_caps(plane: ControlPlane, queue: str, conn: Connection | None = None) -> LogCaps:
    """What the logs of a job of ``queue`` may take on the server (its tenant's limits)."""
    row = _grant_row(plane, conn, queue)
    return LogCaps(int(row.max_job_log_mib) << 20, int(row.max_log_mib) << 20)


def usage(plane: ControlPlane, tenant: str) -> dict[str, Any]:
    """The tenant's queued work now, as the ``Tenant`` view shows it."""
    jobs, replicas = plane.queued_tally(tenant)
    return {
        "pending_jobs": jobs,
        "pending_replicas": replicas,
        "log_bytes": plane.logs.tenant_bytes(tenant),
    }
