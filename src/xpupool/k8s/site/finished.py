"""What a finished job leaves on a Kubernetes site, removed: its Secret at once (nothing that runs
needs it any more), its pods after the sites file's ``finished_pods_retention_s`` (so that
``kubectl logs`` and ``kubectl describe`` still answer for a while).

A job is finished for the site when the plane's store has it in a final state, or has no such
job (a pod or Secret whose job the store never had, or no longer has). Only the plane's own
objects are read: those labelled ``xpupool.io/job`` *and* ``xpupool.io/plane-site: <this site>``,
so that another plane's site, a controller's pods and a kubectl user's gated pods (which carry no
``xpupool.io/job``: ``gated.py`` owns them) are never touched. Everything here runs on the site's
worker thread; the store is read in one :meth:`~xpupool.server.plane.ControlPlane.read`, so a job
the plane holds is never taken for a finished one.

A sweep's pods are the site's pod watch's (``site.py``: the same selector, read once it has
listed them, so that the sweep of every job, when the site is attached and every resync, is not a
second read of every pod of the plane's there, 10,000 after a large restart); its Secrets are
listed in the namespaces it has pods in and in its tenants' namespaces, the only ones where the
chart lets it read Secrets, in pages of :data:`LIST_CHUNK` (``informers/lists.py``: one whose
continue token expired is read again from its start).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from lightkube import Client, operators
from lightkube.generic_resource import GenericNamespacedResource
from sqlalchemy import select

from xpupool.k8s.informers.lists import LIST_CHUNK, list_whole
from xpupool.k8s.site.api_errors import gone_ok
from xpupool.k8s.site.pods import JOB, SITE
from xpupool.k8s.site.sites_file import KubernetesSiteConfig
from xpupool.model.errors import RequestError
from xpupool.server.schemas.jobs import FINAL_STATES, JobPhase
from xpupool.server.storage.jobs import jobs as t_jobs
from xpupool.server.storage.tenants import tenants as t_tenants

if TYPE_CHECKING:
    from xpupool.server.plane import ControlPlane

log = logging.getLogger(__name__)

MAX_JOB_ID = 2**63 - 1
CHUNK = 500  # job ids per query: far below SQLite's and PostgreSQL's parameter limits


def job_label(obj: Mapping[str, Any]) -> int | None:
    """The job id an object's ``xpupool.io/job`` label names; None when it names none (a
    hostile or broken label is no job of the plane's, and is left alone)."""
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    text = labels.get(JOB) if isinstance(labels, Mapping) else None
    if not isinstance(text, str) or not text.isdigit() or len(text) > 19:
        return None
    value = int(text)
    return value if 0 < value <= MAX_JOB_ID else None


def finished_jobs(plane: ControlPlane, ids: Iterable[int]) -> set[int]:
    """Of ``ids``, the jobs the plane's store has in a final state or not at all, read as one
    state with the plane's held jobs (a job held is never finished)."""
    wanted = sorted(set(ids))
    if not wanted:
        return set()

    def look() -> set[int]:
        states: dict[int, JobPhase] = {}
        with plane.db.connect() as conn:
            for i in range(0, len(wanted), CHUNK):  # bounded bound parameters per statement
                chunk = wanted[i : i + CHUNK]
                query = select(t_jobs.c.id, t_jobs.c.state).where(t_jobs.c.id.in_(chunk))
                states.update((int(r.id), JobPhase(r.state)) for r in conn.execute(query))
        return {
            j
            for j in wanted
            if plane.held_run(j) is None and (j not in states or states[j] in FINAL_STATES)
        }

    return plane.read(look)


class FinishedJobs:
    """The site's removal of finished jobs' Secrets and pods (on its worker thread only)."""

    def __init__(
        self,
        config: KubernetesSiteConfig,
        client: Callable[[], Client | None],
        plane: Callable[[], ControlPlane | None],
        watched: Callable[[int | None], dict[int, set[str]]],
        pod: type[GenericNamespacedResource],
        secret: type[GenericNamespacedResource],
    ) -> None:
        """``watched(job)``: the namespaces of the plane's pods on the site by job (of ``job``
        only, unless None), as its pod watch holds them; raises while the watch has not listed
        them (the sweep is then done again later)."""
        self.config = config
        self.site = config.name
        self.retention_s = config.finished_pods_retention_s
        self._client = client
        self._plane = plane
        self._watched = watched
        self._pod = pod
        self._secret = secret
        self._due: dict[int, float] = {}  # job -> when (monotonic) its pods are deleted

    def next_due(self) -> float | None:
        """When the next job's pods are due (monotonic), or None."""
        return min(self._due.values(), default=None)

    def sweep(self, job: int | None = None) -> None:
        """Look at the plane's Secrets and pods of ``job`` (every job when None): those of a
        finished job lose their Secret now and their pods once the retention has passed."""
        client, plane = self._client(), self._plane()
        if client is None or plane is None:
            return
        if job is not None and job in self._due:
            return  # seen finished already, its Secret deleted (a restart's pods, one by one)
        pods = self._watched(job)
        namespaces: set[str] = set().union(*pods.values())
        if job is None:
            namespaces |= self._tenant_namespaces(plane)
        labels: dict[str, Any] = {JOB: operators.exists() if job is None else str(job)}
        labels[SITE] = self.site
        what = f"site {self.site}: finished jobs' Secrets"
        secrets = [
            s
            for ns in sorted(namespaces)
            for s in self._list(client, self._secret, what, namespace=ns, labels=labels)
        ]
        ids = {j for j in map(job_label, secrets) if j is not None} | set(pods)
        done = finished_jobs(plane, ids)
        for obj in secrets:
            if job_label(obj) in done:
                self._delete(client, self._secret, obj, "Secret")
        now = time.monotonic()
        for j in done & set(pods):
            self._due.setdefault(j, now + self.retention_s)
        self.delete_due()

    @staticmethod
    def _list(
        client: Client, kind: type[GenericNamespacedResource], what: str, **selectors: Any
    ) -> list[dict[str, Any]]:
        return list_whole(client, kind, chunk_size=LIST_CHUNK, what=what, **selectors).items

    def delete_secrets(self, job: int, namespaces: Iterable[str]) -> None:
        """Delete job ``job``'s Secrets in ``namespaces`` (its pods' and its tenant's: where the
        chart lets the plane list Secrets), as a stop does."""
        client = self._client()
        assert client is not None
        labels: dict[str, Any] = {JOB: str(job), SITE: self.site}
        for ns in sorted(set(namespaces)):
            for secret in client.list(self._secret, namespace=ns, labels=labels):
                self._delete(client, self._secret, dict(secret), "Secret")

    def _tenant_namespaces(self, plane: ControlPlane) -> set[str]:
        with plane.db.connect() as conn:
            names = conn.execute(select(t_tenants.c.name)).scalars().all()
        out = set()
        for name in names:
            with contextlib.suppress(RequestError):  # no namespace name: it has no pods either
                out.add(self.config.namespace(str(name)))
        return out

    def delete_due(self) -> None:
        """Delete the pods of the jobs whose retention has passed. A job is taken off the list
        first: what an unreachable or refusing API server keeps is found again by the next
        sweep of every job (never a loop of failing requests)."""
        client = self._client()
        if client is None:
            return
        now = time.monotonic()
        for job in [j for j, when in self._due.items() if when <= now]:
            del self._due[job]
            labels: dict[str, Any] = {JOB: str(job), SITE: self.site}
            for pod in client.list(self._pod, namespace="*", labels=labels):
                self._delete(client, self._pod, dict(pod), "pod")

    def _delete(
        self,
        client: Client,
        kind: type[GenericNamespacedResource],
        obj: Mapping[str, Any],
        what: str,
    ) -> None:
        meta = obj["metadata"]
        with gone_ok():
            client.delete(kind, meta["name"], namespace=meta["namespace"])
        log.info(
            "site %s: %s %s/%s of job %s deleted",
            self.site,
            what,
            meta["namespace"],
            meta["name"],
            job_label(obj),
        )
