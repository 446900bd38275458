"""Jobs an older release stored that this one refuses on submission, settled once on start.

Before issue 18 a job could be stored with a NUL byte or a lone surrogate in its command or
environment: no process can be started with one (``Popen`` raises), so such a job waited forever
as ``running (pid None)`` holding its devices, and a lone surrogate made every listing of it
fail. Such a job is failed on start, with the reason, and its devices are freed (it never ran).
Text that is only shown (a name, a reason, the request) is shown readable instead
(``wire_values.readable``). Queued priorities above their queue's cap, which did not exist then,
come down to the cap (``priority_caps.py``). A waiting job whose placement profile this start does
not know (it came from a ``--profile`` file the server no longer loads) is failed with the reason,
rather than refused by the scheduler at every pass.

Run by the plane's start, as its own operation: it takes the plane's lock itself
(``services/stored_jobs.py`` keeps the name the start calls).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from sqlalchemy import select

from xpupool.server import job_lifecycle as lc
from xpupool.server.plane.priority_caps import cap_queued
from xpupool.server.schemas.jobs import HOLDING_STATES, JobPhase, StopCause
from xpupool.server.storage.jobs import jobs as t_jobs
from xpupool.server.wire_values import first_unsafe

if TYPE_CHECKING:
    from xpupool.server.plane.control import ControlPlane

__all__ = ["settle_stored_jobs"]

log = logging.getLogger("xpupool.server")

_WAITING = (JobPhase.PENDING, *sorted(HOLDING_STATES))


def settle_stored_jobs(plane: ControlPlane) -> None:
    """Fail the waiting or holding jobs whose command, environment or image cannot be passed to
    a process, and cap queued priorities; each change is logged and recorded as an event. The
    stored jobs and the plane's queue are read as one state and settled in one transaction."""
    with plane.write() as conn:
        rows = conn.execute(
            select(t_jobs.c.id, t_jobs.c.state, t_jobs.c.command, t_jobs.c.env, t_jobs.c.image)
            .where(t_jobs.c.state.in_([st.value for st in _WAITING]))
            .order_by(t_jobs.c.id)
        ).all()
        for row in rows:
            found = first_unsafe({"command": row.command, "env": row.env, "image": row.image})
            if found is None:
                continue
            path, _, problem = found
            reason = f"cannot be run: {path} {problem} (stored by an older release); resubmit"
            plane.apply(conn, row.id, lc.Stop(StopCause.UNRUNNABLE, reason))
            log.warning("job %d: %s", row.id, reason)
        for job_id, pending in list(plane.queued.items()):
            policy = pending.request.node_policy
            if policy is None or policy in plane.engine.profiles:
                continue
            reason = f"unknown placement profile {policy!r} (not loaded by this start); resubmit"
            plane.apply(conn, job_id, lc.Stop(StopCause.UNRUNNABLE, reason))
            log.warning("job %d: %s", job_id, reason)
        for job_id in cap_queued(plane, conn):
            log.warning("job %d: priority lowered to its queue's max_priority", job_id)
