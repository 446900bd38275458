"""The store's side of the jobs the plane made for pods it did not create (a kubectl user's
gated pod on a Kubernetes site, ``k8s/site/gated.py``): a row names the pod a job stands for.

The row is written in the submission's own transaction (:func:`remember`, given to
``services.jobs.submit`` as its ``then``): a job stored without its row would be taken, after a
restart, for one the plane must make pods for, beside the user's own pod. It goes when the pod is
gone and the job is final (:func:`forget`), or with the job when retention deletes it
(``plane/store.py``'s ``delete_jobs``). A gang job (one owner's pods of a PodGroup) stands for a
pod per replica: replica 0 in ``site_pods``, the others in ``site_gang_pods``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlalchemy import Connection, delete, insert, select

from xpupool.server.storage.site_pods import site_gang_pods as t_gang_pods
from xpupool.server.storage.site_pods import site_pods as t_site_pods

if TYPE_CHECKING:
    from xpupool.server.plane.secret_rows import Store


@dataclass(frozen=True, slots=True)
class PodJob:
    """Job ``job``'s replica ``replica`` stands for pod ``namespace/name`` (``uid``) of a site."""

    job: int
    namespace: str
    name: str
    uid: str
    replica: int = 0


def remember(conn: Connection, site: str, pod: PodJob) -> None:
    """Write ``pod``'s row in the transaction ``conn`` (the submission's)."""
    where = {"namespace": pod.namespace, "name": pod.name, "uid": pod.uid}
    if pod.replica:
        values = {"job_id": pod.job, "replica": pod.replica, "site": site, **where}
        conn.execute(insert(t_gang_pods).values(**values))
    else:
        conn.execute(insert(t_site_pods).values(job_id=pod.job, site=site, **where))


def known(conn: Connection, site: str) -> list[PodJob]:
    """Every pod job of ``site`` still stored."""
    rows = conn.execute(select(t_site_pods).where(t_site_pods.c.site == site)).mappings()
    found = [PodJob(int(r["job_id"]), r["namespace"], r["name"], r["uid"]) for r in rows]
    more = conn.execute(select(t_gang_pods).where(t_gang_pods.c.site == site)).mappings()
    found += [
        PodJob(int(r["job_id"]), r["namespace"], r["name"], r["uid"], int(r["replica"]))
        for r in more
    ]
    return found


def forget(plane: Store, job: int) -> None:
    """Job ``job``'s pod is gone and the job final: its row goes."""
    with plane.write() as conn:
        delete_rows(conn, [job])


def delete_rows(conn: Connection, jobs: list[int]) -> None:
    """The pod rows of ``jobs`` go (every member of a gang)."""
    conn.execute(delete(t_site_pods).where(t_site_pods.c.job_id.in_(jobs)))
    conn.execute(delete(t_gang_pods).where(t_gang_pods.c.job_id.in_(jobs)))
