"""Which site a pending job is dispatched to: the scheduling pass's step before it decides a job
that names a dataset or a preferred site and leaves more than one site open (issue 51). A job that
names neither has nothing for the site choice to weigh that the placement policy does not: it is
placed across the sites open to it, where the policy finds room first (a gang within one site),
and waits for whichever frees first rather than for one site's queue.

The scheduling cycle ranks the sites (``SchedulingCycle.dispatch``, ``engine/site_choice.py``);
this records the choice as the job's: the site, stored in the job's ``site`` apart from its request
(the sites the user allowed), so a restarted plane keeps it and a lost site can send the job
elsewhere; and the choice and the runner-up with their numbers as events of the job, in the batch
that decides it. From then on the job is decided kept to that site. The run times the wait
estimator learns come from the jobs that succeeded (``ControlPlane.apply``).
"""

from __future__ import annotations

from xpupool.server.plane import ControlPlane, PendingJob
from xpupool.server.schemas.jobs import JobPhase
from xpupool.server.storage.job_writes import JobWrites

__all__ = ["dispatch"]


def dispatch(plane: ControlPlane, writes: JobWrites, job: PendingJob) -> None:
    """Choose ``job``'s site if it has none, names a dataset or a preferred site, and more than
    one site is open to it, or choose again if the site it was dispatched to takes no new work
    now (drained, unreachable), under the lock,
    in the batch's transaction ``writes``. Raises ``RequestError`` for a dataset the sites file
    no longer names (the pass keeps the job pending with the reason)."""
    now, pending = plane.clock(), JobPhase.PENDING.value
    if job.site is not None:
        if plane.cycle.takes_work(job.site):
            return
        why = f"site {job.site} takes no new work (drained or unreachable): dispatched again"
        plane.dispatch(job.id, None)
        writes.update(job.id, {"site": None})
        writes.event({"job_id": job.id, "at": now, "state": pending, "reason": why})
    if job.request.data is None and job.request.preferred_site is None:
        return  # nothing to weigh but what the placement policy weighs: placed across its sites
    choice = plane.cycle.dispatch(job.request, lambda: plane.dispatched(job), job.max_runtime_s)
    if choice is None:
        return
    site = choice.chosen.site
    plane.dispatch(job.id, site)
    writes.update(job.id, {"site": site})
    for line in choice.events():
        writes.event({"job_id": job.id, "at": now, "state": pending, "reason": line})
