"""The store's side of the jobs the plane made for pods it did not create (a kubectl user's
gated pod on a Kubernetes site, ``k8s/site/gated.py``): a row names the pod a job stands for.

The row is written in the submission's own transaction (:func:`remember`, given to
``services.jobs.submit`` as its ``then``): a job stored without its row would be taken, after a
restart, for one the plane must make pods for, beside the user's own pod. It goes when the pod is
gone and the job is final (:func:`forget`), or with the job when retention deletes it
(``plane/store.py``'s ``delete_jobs``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlalchemy import Connection, delete, insert, select

from xpupool.server.storage.site_pods import site_pods as t_site_pods

if TYPE_CHECKING:
    from xpupool.server.plane.secret_rows import Store


@dataclass(frozen=True, slots=True)
class PodJob:
    """Job ``job`` stands for pod ``namespace/name`` (``uid``) of a site."""

    job: int
    namespace: str
    name: str
    uid: str


def remember(conn: Connection, site: str, pod: PodJob) -> None:
    """Write ``pod``'s row in the transaction ``conn`` (the submission's)."""
    where = {"namespace": pod.namespace, "name": pod.name, "uid": pod.uid}
    conn.execute(insert(t_site_pods).values(job_id=pod.job, site=site, **where))


def known(conn: Connection, site: str) -> list[PodJob]:
    """Every pod job of ``site`` still stored."""
    rows = conn.execute(select(t_site_pods).where(t_site_pods.c.site == site)).mappings()
    return [PodJob(int(r["job_id"]), r["namespace"], r["name"], r["uid"]) for r in rows]


def forget(plane: Store, job: int) -> None:
    """Job ``job``'s pod is gone and the job final: its row goes."""
    with plane.write() as conn:
        conn.execute(delete(t_site_pods).where(t_site_pods.c.job_id == job))
