"""What a site that runs work itself (a Kubernetes cluster: ``k8s/site/site.py``) changes in the
plane's books, as the plane's own operations: a node back in its cluster, a node deleted from it,
a replica the cluster has not bound yet (noted with the site's reports: :class:`Waiting`), and
runs counted with what their pods are made of. Each
takes the plane's lock itself, so that what it reads of the node and job books is one state and
what it changes is one step, in memory and in the store; the site acts on the copies they return
afterwards, never holding the lock while it talks to its cluster. ``server`` never imports
``k8s``: the site imports these.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, select

from xpupool.model.allocation import Allocation
from xpupool.model.device import Node
from xpupool.model.request_model import request_from_dict
from xpupool.server import job_lifecycle as lc
from xpupool.server.plane import node_lifecycle as nl
from xpupool.server.plane import secret_rows
from xpupool.server.plane.records import NodeRecord, RunView
from xpupool.server.schemas.agent_protocol import ReplicaReport
from xpupool.server.schemas.jobs import JobPhase
from xpupool.server.schemas.nodes import NodeStatus
from xpupool.server.storage.jobs import jobs as t_jobs

if TYPE_CHECKING:
    from xpupool.server.plane.control import ControlPlane

__all__ = [
    "SiteReport",
    "SiteRun",
    "Waiting",
    "count_site_runs",
    "node_back",
    "node_deleted",
    "note_waiting",
]


def node_back(plane: ControlPlane, name: str) -> None:
    """Node ``name``, lost, is back in its site's cluster: ready again, as one step."""
    with plane.write() as conn:  # back in the cluster: ready again
        plane.node_event(conn, name, nl.Heard())


def node_deleted(plane: ControlPlane, name: str, rec: NodeRecord, why: str) -> None:
    """Node ``name`` (``rec``: its record) deleted from its site's cluster: lost in the plane's
    book (nothing new goes there), and the jobs it holds dealt with as a lost node's (requeued
    by default, with ``why``), read and changed as one step."""
    with plane.write() as conn:
        if rec.status is not NodeStatus.LOST:
            plane.node_event(conn, name, nl.Silent())
        for job in [
            j for j in plane.held_jobs.values() if any(a.node == name for a in j.allocations)
        ]:
            plane.apply(conn, job.id, lc.LeaseExpired(why, reported=True))


@dataclass(frozen=True, slots=True)
class Waiting:
    """Held job ``job``'s run ``attempt`` waits on its site with ``why`` (the cluster has not
    bound its pod): a site's note, applied with its replica reports
    (``agent_reports.apply_site_reports``)."""

    job: int
    attempt: int
    why: str


SiteReport = tuple[str, ReplicaReport] | Waiting
"""What a site that runs work itself tells the plane of its pods: a replica's report under the
node the plane placed it on, ``(node, report)``, or a run's :class:`Waiting`."""


def note_waiting(plane: ControlPlane, conn: Connection, w: Waiting) -> None:
    """Record ``w.why`` as the job's reason and an event, in the caller's write, unless the job
    is no longer held, holds another run, is stopping or already running."""
    job = plane.held_jobs.get(w.job)
    if job is None or job.attempt != w.attempt or job.stop is not None:
        return
    if job.state is JobPhase.RUNNING:
        return
    plane.apply(conn, job.id, lc.Note(w.why))


@dataclass(frozen=True, slots=True)
class SiteRun:
    """A run counted for a site, as one write of the plane saw it: the job's tenant and queue,
    what its row says it runs, its secrets opened (one deleted since the submission is left out,
    as an agent leaves it out), and each allocation on a node of the site with that node."""

    job: int
    tenant: str
    queue: str
    image: str
    command: tuple[str, ...]
    env: dict[str, Any]
    volumes: bool
    secrets: tuple[tuple[str, Any], ...]  # (name, env) of each secret it names that is there
    values: dict[str, bytes]  # each such secret's value
    placed: list[tuple[Allocation, Node]]
    gang: bool = False  # its request is a gang: its replicas run all or none


def count_site_runs(
    plane: ControlPlane,
    runs: Sequence[tuple[int, int]],
    why: Callable[[RunView, int], str],
    owns: Callable[[NodeRecord], bool],
) -> list[SiteRun | None]:
    """Count run ``attempt`` of held job ``job`` as handed out (``Dispatch``, with the reason
    ``why(run, attempt)``) unless it is counted already, and read what its pods are made of (its
    row, its secrets, its allocations on the nodes ``owns`` says are the site's), for each
    ``(job, attempt)`` of ``runs``, all in one write (a site that starts many jobs at once pays
    for one transaction, not one per job); None for one whose job is gone, stopping, or whose
    run is counted already (a start after an adoption)."""
    with plane.write() as conn:
        return [_count(plane, conn, job_id, attempt, why, owns) for job_id, attempt in runs]


def _count(
    plane: ControlPlane,
    conn: Any,
    job_id: int,
    attempt: int,
    why: Callable[[RunView, int], str],
    owns: Callable[[NodeRecord], bool],
) -> SiteRun | None:
    job = plane.held_jobs.get(job_id)
    if job is None or job.stop is not None:
        return None
    if job.attempt < attempt:
        plane.apply(conn, job.id, lc.Dispatch(attempt, why(RunView.of(job), attempt)))
    elif job.attempt != attempt:
        return None
    row = conn.execute(select(t_jobs).where(t_jobs.c.id == job_id)).mappings().first()
    assert row is not None
    refs = [(str(r["name"]), r.get("env")) for r in row["secrets"] or ()]
    values = _open_secrets(plane, conn, job.tenant, [name for name, _ in refs])
    secrets = tuple((name, env) for name, env in refs if name in values)
    placed: list[tuple[Allocation, Node]] = []
    for a in job.allocations:
        rec = plane.node(a.node)
        if rec is None or not owns(rec):
            continue
        placed.append((a, rec.node))
    return SiteRun(
        job.id,
        job.tenant,
        job.queue,
        str(row["image"] or ""),
        tuple(row["command"] or ()),
        dict(row["env"] or {}),
        bool(row["volumes"]),
        secrets,
        values,
        placed,
        bool(request_from_dict(row["request"]).gang),
    )


def _open_secrets(
    plane: ControlPlane, conn: Any, tenant: str, names: list[str]
) -> dict[str, bytes]:
    """The tenant's secrets ``names`` opened (one deleted since the submission is left out,
    as an agent leaves it out)."""
    if not names:
        return {}
    sealed = secret_rows.sealed(conn, tenant, names)
    return {n: plane.secret_box.unseal(tenant, n, sealed[n]) for n in names if n in sealed}
