"""Sites that stop answering (issue 51, part 3): which node sites are unreachable, and what that
does to the jobs there.

A site is unreachable when every one of its nodes the plane hears from is lost (silent past
``lost_after_s``, the grace) and it has no node of another source (a cluster file's nodes never go
silent), in a pool of more than one site. An agent's node is heard by its heartbeats; a Kubernetes
site's nodes are heard while the site's API server answers its watches (:func:`hear`, each round:
the nodes it lists), so a site whose API server stops answering goes silent, and unreachable, by
the same rule, and answers again as its watches do. The lost-node watch asks after each round
(``services/agents.mark_lost_nodes``), and then:

- a job scheduled or running there moves to ``unknown`` (``job_lifecycle.SiteUnreachable``)
  unless it says ``on_site_lost: requeue``: it keeps its devices and its queue's quota, and the
  plane does not fail or requeue it on its own word (a silence past the lease is not enough:
  the plane cannot tell a run stopped by its lease from one it no longer hears, across a
  partition); a job that says ``requeue`` is left to the lost-node rule (lease, then requeue; on
  a Kubernetes site, where no lease stops a pod, only such a job is requeued: a silent site's
  other jobs are never requeued on the plane's word, in a pool of one site either);
- a pending job dispatched there is dispatched again by the next pass (``job_sites.py``: a site
  none of whose nodes takes new work is never kept nor chosen, ``SiteChooser.takes_work``), and
  a pass is asked for;
- when the site answers again, its ``unknown`` jobs go back to ``running``
  (``job_lifecycle.Reached``; or at once on a report of a replica: ``Start``, ``Ended``) and the
  agents' reports reconcile them as after any silence: a run that ended is recorded, one its
  lease stopped is requeued or lost by its own policy, and a replica of a job dispatched
  elsewhere meanwhile is told to stop by the heartbeat's reply. A restarted plane reconciles its
  ``unknown`` jobs by those reports alone.
"""

from __future__ import annotations

from collections import Counter

from sqlalchemy import Connection, select

from xpupool.server import job_lifecycle as lc
from xpupool.server.plane import ControlPlane, HeldJob
from xpupool.server.plane import node_lifecycle as nl
from xpupool.server.plane.nodes import heard_source
from xpupool.server.schemas.jobs import JobPhase
from xpupool.server.schemas.nodes import NodeStatus
from xpupool.server.sites import WatchedSite
from xpupool.server.storage.jobs import jobs as t_jobs

__all__ = ["check", "hear", "policy", "unreachable_sites"]


def hear(plane: ControlPlane, conn: Connection) -> None:
    """Each site heard through its API server's watches (:class:`WatchedSite`) whose server
    answers now: the nodes it lists are heard now (their ``last_heartbeat``, the site's last
    contact), and a lost one is ready again; a site that does not answer is not heard, and its
    nodes go silent (in ``conn``'s transaction, under the plane's write)."""
    for site in plane.sites:
        if not isinstance(site, WatchedSite):
            continue
        listed = site.answering()
        if listed is None:
            continue
        names = [n for n in listed if (rec := plane.node(n)) is not None and site.owns(rec)]
        if not names:
            continue
        plane.heard(conn, names, plane.clock())
        for name in names:
            rec = plane.node(name)
            if rec is not None and rec.status is NodeStatus.LOST:
                plane.node_event(conn, name, nl.Heard())  # ready again


def unreachable_sites(plane: ControlPlane) -> frozenset[str]:
    """The node sites whose every node is heard from (an agent's, a Kubernetes site's) and lost
    (under the lock), in a pool of more than one site: in a pool of one, a site lost is every
    node lost, and the lost-node rule (requeue or fail after the lease) stays what it was; there
    is nowhere else to go."""
    if len(plane.engine.sites()) < 2:
        return frozenset()
    total: Counter[str] = Counter()
    lost: Counter[str] = Counter()
    for _name, rec in plane.heard_node_records():
        total[rec.node.site] += 1
        lost[rec.node.site] += rec.status is NodeStatus.LOST
    down = {site for site, n in total.items() if lost[site] == n}
    if down:  # rare: only then walk every node for sites that hold others too
        down -= {r.node.site for r in plane.node_records.values() if not heard_source(r.source)}
    return frozenset(down)


def check(plane: ControlPlane, conn: Connection) -> frozenset[str]:
    """Act on the sites unreachable now (see the module docstring), in ``conn``'s transaction
    under the plane's write; returns them."""
    down = unreachable_sites(plane)
    was = plane.site_dispatch.unreachable
    plane.site_dispatch.unreachable = down
    if not down and not was:  # the usual round: nothing to walk
        return down
    for job in list(plane.held_jobs.values()):
        sites = _sites_of(plane, job)
        lost = sorted(sites & down)
        if lost and job.state in (JobPhase.SCHEDULED, JobPhase.RUNNING):
            if policy(conn, job.id) == "wait":
                why = (
                    f"site {', '.join(lost)} unreachable: every node silent past "
                    f"{plane.lost_after_s:g} s (an agent's heartbeats, a Kubernetes site's API "
                    "server); its replicas' state is unknown until it answers"
                )
                plane.apply(conn, job.id, lc.SiteUnreachable(why))
        elif sites and not lost and job.state is JobPhase.UNKNOWN:
            plane.apply(conn, job.id, lc.Reached(f"site {', '.join(sorted(sites))} answers again"))
    if down - was:  # its pending jobs are dispatched again by the next pass (job_sites.py)
        plane.bump()
    return down


def _sites_of(plane: ControlPlane, job: HeldJob) -> set[str]:
    """The sites of ``job``'s nodes (one, unless it may span sites)."""
    recs = (plane.node(a.node) for a in job.allocations)
    return {rec.node.site for rec in recs if rec is not None}


def policy(conn: Connection, job_id: int) -> str:
    """The job's ``on_site_lost`` (stored; null: 'wait')."""
    found = conn.execute(select(t_jobs.c.on_site_lost).where(t_jobs.c.id == job_id)).scalar()
    return str(found or "wait")
