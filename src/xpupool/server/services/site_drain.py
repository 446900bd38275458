"""Draining a site for planned maintenance (issue 51, part 3): no new work goes there, and the work
running there is left to finish or moved, by each job's ``on_site_lost``.

A drain is the node cordon the plane already has, applied to every node of the site in one
transaction: cordons are stored with the nodes, so a drain survives a restart, and the engine then
takes no new replica there, whatever a job names. The site choice never keeps a job dispatched to
a site none of whose nodes takes new work (``SiteChooser.takes_work``): the next pass dispatches
the pending jobs there again (``job_sites.py``). A running job saying ``on_site_lost:
requeue`` is stopped to be moved (stop cause ``preempted``: retried per its ``retry_on``, as a
preemption is); one saying ``wait`` (the default) is left to finish there. Undraining uncordons
the nodes the drain cordoned (each is marked so in the store); a node the admin cordoned on its
own, before the drain or during it, stays cordoned.
"""

from __future__ import annotations

from sqlalchemy import select

from xpupool.server import job_lifecycle as lc
from xpupool.server.plane import ControlPlane
from xpupool.server.schemas.jobs import StopCause
from xpupool.server.schemas.nodes import Site
from xpupool.server.services.fleet import list_sites
from xpupool.server.storage.jobs import jobs as t_jobs

__all__ = ["drain_site"]


def drain_site(plane: ControlPlane, name: str, drain: bool) -> Site:
    """Drain (or undrain) site ``name``; the site as listed after it. NotFound for a site no
    node names."""
    nodes = set(plane.set_site_cordon(name, drain))
    if drain:
        held = plane.read(
            lambda: [
                j.id
                for j in plane.held_jobs.values()
                if j.stop is None and any(a.node in nodes for a in j.allocations)
            ]
        )
        why = f"site {name} drained: moved (on_site_lost: requeue)"
        plane.stop_jobs(
            [(j, lc.Stop(StopCause.PREEMPTED, why)) for j in _requeue_policy(plane, held)]
        )
    plane.bump()  # its pending jobs are dispatched again by the next pass (job_sites.py)
    return next(s for s in list_sites(plane) if s.name == name)


def _requeue_policy(plane: ControlPlane, job_ids: list[int]) -> list[int]:
    """Those of ``job_ids`` whose stored ``on_site_lost`` is 'requeue'."""
    if not job_ids:
        return []
    query = select(t_jobs.c.id).where(t_jobs.c.id.in_(job_ids), t_jobs.c.on_site_lost == "requeue")
    with plane.db.connect() as conn:
        return sorted(conn.execute(query).scalars())
