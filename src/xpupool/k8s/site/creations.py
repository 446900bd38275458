"""Many runs' pods made at once by a Kubernetes site's worker (issue 49: 100 jobs a second).

A pod is one request to the API server, a round trip of milliseconds to tens of them on a loaded
machine; made one after another, with the plane's write that counts each run before it, they held
the site to 23 to 28 pods a second at any rate of submissions (docs/benchmarks.md, Kubernetes
site). So the worker takes the starts queued one after another as one batch (:func:`take_batch`)
and hands it to :class:`RunPods`: the plane counts their runs in one write
(``site_runs.count_site_runs``), the cluster-wide objects they need are made once (a tenant's
namespace once for the site's life: remembered, and made again only when a create in it is
answered 404, the namespace deleted since), and
:class:`InFlight` makes the runs' pods on a bounded pool of threads that share the worker's client
and its kept-alive connections, one run per thread, that run's objects in their order (its earlier
runs' pods deleted, its Secret, then its pods by replica).

The worker waits for the whole batch before its next task, so what it guaranteed one task at a
time still holds: a stop queued after a start runs after it; credentials rotate with no request of
the worker's in flight; a batch holds one start per job, so no two threads make one run's pods.
Names are idempotent (a 409 is done), so a run whose creation failed is made again whole, and the
failure of one run fails or retries that run alone, never the others of its batch.
"""

from __future__ import annotations

import contextlib
import logging
import queue
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

from lightkube import Client
from lightkube.core.exceptions import ApiError

from xpupool.k8s.informers.kubeconfig import RawPod
from xpupool.k8s.site.api_errors import exists_ok, forbidden_ok
from xpupool.k8s.site.cluster_objects import RawNamespace, RawPriorityClass, RawSecret
from xpupool.k8s.site.pods import (
    TERMINAL,
    PodPlan,
    PodState,
    build_pod,
    pod_name,
    priority_class,
    secret_object,
)
from xpupool.k8s.site.sites_file import KubernetesSiteConfig
from xpupool.model.errors import RequestError
from xpupool.server.plane import site_runs
from xpupool.server.plane.records import NodeRecord, RunView
from xpupool.server.schemas.agent_protocol import ReplicaReport, ReplicaState

if TYPE_CHECKING:
    from xpupool.server.plane import ControlPlane

__all__ = [
    "MAX_BATCH",
    "MAX_IN_FLIGHT",
    "InFlight",
    "NamespaceGoneError",
    "RunPods",
    "Start",
    "take_batch",
]

log = logging.getLogger(__name__)

MAX_IN_FLIGHT = 16
"""Runs whose pods are being made at once: under httpx's 20 kept-alive connections of the client
they share (its log streams have a client of their own), so none is opened per request."""
MAX_BATCH = 64
"""Starts taken as one batch: the plane's write that counts them holds its lock that long."""

T = TypeVar("T")
Q = TypeVar("Q")
K = TypeVar("K")


def take_batch(
    first: T, tasks: queue.Queue[Q], joins: Callable[[Q, Sequence[T]], T | None], limit: int
) -> tuple[list[T], list[Q]]:
    """``first`` and the tasks queued right behind it that ``joins`` takes into the batch
    (``joins(task, batch)``: the task as a batch member, or None), ``limit`` at most, taken
    without waiting; and the task that ended the batch, if one did (``[]`` or one task: the
    caller does it next, before anything else from the queue, so the order is kept)."""
    batch = [first]
    while len(batch) < limit:
        try:
            task = tasks.get_nowait()
        except queue.Empty:
            return batch, []
        member = joins(task, batch)
        if member is None:
            return batch, [task]
        batch.append(member)
    return batch, []


class InFlight:
    """A bounded pool of threads on which a batch's units run at once (see the module's
    docstring)."""

    def __init__(self, name: str, workers: int = MAX_IN_FLIGHT) -> None:
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix=name)

    def run(self, units: Sequence[tuple[K, Callable[[], None]]]) -> list[tuple[K, Exception]]:
        """Run every ``(key, unit)`` and wait for all of them: ``(key, what it raised)`` of each
        that failed, in the order given. One unit alone runs on the caller's thread."""
        if len(units) == 1:
            key, unit = units[0]
            try:
                unit()
            except Exception as exc:
                return [(key, exc)]
            return []
        futures = [(key, self._pool.submit(unit)) for key, unit in units]
        failed: list[tuple[K, Exception]] = []
        for key, future in futures:
            raised = future.exception()
            if isinstance(raised, Exception):
                failed.append((key, raised))
            elif raised is not None:  # KeyboardInterrupt, SystemExit: not a request's failure
                raise raised
        return failed

    def close(self) -> None:
        """Stop taking units; what runs ends with its request."""
        self._pool.shutdown(wait=False, cancel_futures=True)


class NamespaceGoneError(Exception):
    """A create in a tenant's namespace the site had made or found was answered 404: deleted
    since. The site forgot it; the run is made again after the worker's backoff (a passing
    failure), its namespace first."""


@dataclass(frozen=True, slots=True)
class Start:
    """The worker's task: make the pods of run ``attempt`` of job ``job``."""

    job: int
    attempt: int


@dataclass(frozen=True, slots=True)
class _Made:
    """What a run is made of: each replica's pod plan with the node the plane placed it on,
    and the Secret of the job's secrets (None: it names none)."""

    pods: list[tuple[PodPlan, str]]
    secret: dict[str, Any] | None


class RunPods:
    """The pods of the plane's runs on one site, made a batch at a time (the module's
    docstring). What the site holds comes through callables: its client (None before it is
    attached; a rotation replaces it between batches), its plane, which nodes are its own, how
    a replica's report reaches the plane, a job's pods its informer holds (``(namespace/name,
    state)``: ``seen_pods.py``), and how a pod of no run is deleted."""

    def __init__(
        self,
        config: KubernetesSiteConfig,
        client: Callable[[], Client | None],
        plane: Callable[[], ControlPlane | None],
        owns: Callable[[NodeRecord], bool],
        send: Callable[[str, ReplicaReport], None],
        pods: Callable[[int], Sequence[tuple[str, PodState]]],
        delete_pod: Callable[[Client, str, str], None],
    ) -> None:
        self.config = config
        self._client = client
        self._plane = plane
        self._owns = owns
        self._send = send
        self._pods = pods
        self._delete_pod = delete_pod
        self._in_flight = InFlight(f"site-{config.name}-create")
        self._priority_class = False  # the plane's PriorityClass is there (made or found)
        # tenants' namespaces made or found (create_namespaces): added on the worker's thread,
        # dropped on the pool's when a create there is answered 404
        self._namespaces: set[str] = set()

    def close(self) -> None:
        self._in_flight.close()

    def start_all(self, starts: Sequence[Start]) -> list[tuple[Start, Exception]]:
        """Make the pods of the runs ``starts`` begin: counted in one write, the cluster-wide
        objects they need made once, then each run's pods on the pool of requests in flight.
        Returns each start that failed with what it raised: one run's failure is its own,
        never its batch's."""
        try:
            runs = self._count(starts)
        except Exception as exc:  # the store failed: nothing was counted
            return [(s, exc) for s in starts]
        failed: list[tuple[Start, Exception]] = []
        work: list[tuple[Start, _Made]] = []
        for start, run in zip(starts, runs, strict=True):
            if run is None:
                continue
            try:
                made = self._made(run, start.attempt)
            except Exception as exc:  # (no namespace name for its tenant, say): this run's
                failed.append((start, exc))
                continue
            if made.pods:
                work.append((start, made))
        if not work:
            return failed
        client = self._client()
        assert client is not None
        try:
            refused, fresh = self._cluster_objects(
                client, {m.pods[0][0].namespace for _, m in work}
            )
        except Exception as exc:  # the PriorityClass: every run's
            return [*failed, *((s, exc) for s, _ in work)]
        earlier = self._earlier_pods({s.job: s.attempt for s, _ in work})
        units: list[tuple[Start, Callable[[], None]]] = []
        for start, made in work:
            namespace = made.pods[0][0].namespace
            why = refused.get(namespace)
            if why is not None:
                failed.append((start, why))
                continue
            make = partial(
                self._make, client, start, made, earlier.get(start.job, []), namespace in fresh
            )
            units.append((start, make))
        return [*failed, *self._in_flight.run(units)]

    def _count(self, starts: Sequence[Start]) -> list[site_runs.SiteRun | None]:
        """Count each start's run and read what its pods are made of, all in one write (the
        plane's ``site_runs.count_site_runs``); None for a start whose job is gone, stopping, or
        whose run is counted already (a start after an adoption)."""
        plane = self._plane()
        assert plane is not None

        def why(run: RunView, attempt: int) -> str:
            where = f"site {self.config.name}, namespace {self.config.namespace(run.tenant)}"
            return f"attempt {attempt}: pods in {where}"

        asked = [(s.job, s.attempt) for s in starts]
        return site_runs.count_site_runs(plane, asked, why, self._owns)

    def _made(self, run: site_runs.SiteRun, attempt: int) -> _Made:
        """The pods of ``run`` (its ``attempt``) planned from the plane's copy of it."""
        namespace = self.config.namespace(run.tenant)
        out: list[tuple[PodPlan, str]] = []
        for a, node in run.placed:
            cards = {d.uuid: d for d in node.devices}
            first = cards.get(a.devices[0].uuid) if a.devices else None
            plan = PodPlan(
                job=run.job,
                replica=a.replica,
                attempt=attempt,
                tenant=run.tenant,
                queue=run.queue,
                site=self.config.name,
                namespace=namespace,
                scheduler_name=self.config.scheduler_name,
                image=run.image,
                command=run.command,
                env=dict(run.env),
                allocation=a,
                vendor=first.vendor if first is not None else "",
                card_memory_mib=first.memory_mib if first is not None else 0,
                secrets=run.secrets,
                volumes=run.volumes,
                gang_size=len(run.placed) if run.gang and len(run.placed) > 1 else 0,
            )
            out.append((plan, a.node))
        secret = secret_object(out[0][0], run.values) if out and run.secrets else None
        return _Made(out, secret)

    def _cluster_objects(
        self, client: Client, namespaces: Collection[str]
    ) -> tuple[dict[str, Exception], set[str]]:
        """What pods of the plane's need beside them: its PriorityClass (once; raises what its
        create raised), and the tenants' namespaces when the site may make them, each once (a
        409 each batch was the worker's most frequent request). Returns those whose create
        failed, with what it raised (their runs fail or wait, the others go on), and those
        created (or found) by this batch."""
        if not self._priority_class:  # the chart makes it and gives the plane no right to
            with exists_ok(), forbidden_ok():
                client.create(RawPriorityClass.from_dict(priority_class()))
            self._priority_class = True
        refused: dict[str, Exception] = {}
        fresh: set[str] = set()
        for ns in sorted(namespaces) if self.config.create_namespaces else ():
            if ns in self._namespaces:
                continue
            body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
            try:
                with exists_ok():
                    client.create(RawNamespace.from_dict(body))
            except Exception as exc:
                refused[ns] = exc
                continue
            self._namespaces.add(ns)
            fresh.add(ns)
        return refused, fresh

    @contextlib.contextmanager
    def _namespace_there(self, namespace: str, made_now: bool) -> Iterator[None]:
        """A create in ``namespace`` answered 404 (the namespace is not there): one the site
        made or found in an earlier batch was deleted since, so it is forgotten and
        :class:`NamespaceGoneError` raised (made again on the run's next try); one made by this
        very batch, or one the site does not make, is the API server's word."""
        try:
            yield
        except ApiError as exc:
            if exc.status.code != 404 or made_now or not self.config.create_namespaces:
                raise
            self._namespaces.discard(namespace)
            why = f"site {self.config.name}: namespace {namespace} is gone; made again"
            raise NamespaceGoneError(why) from exc

    def _earlier_pods(self, attempts: Mapping[int, int]) -> dict[int, list[tuple[str, str]]]:
        """(namespace, name) of the unfinished pods of earlier runs (a lost node's) of each job
        of ``attempts`` (job -> the run now made), as the pod informer holds them: read by job
        (a scan of every pod held, per batch, grew with the site's pods)."""
        out: dict[int, list[tuple[str, str]]] = {}
        for job, attempt in attempts.items():
            for key, old in self._pods(job):
                if old.attempt < attempt and old.phase not in TERMINAL:
                    namespace, _, name = key.partition("/")
                    out.setdefault(job, []).append((namespace, name))
        return out

    def _make(
        self,
        client: Client,
        start: Start,
        made: _Made,
        earlier: Sequence[tuple[str, str]],
        namespace_made_now: bool,
    ) -> None:
        """One run's objects, in order (on a thread of the pool): its earlier runs' pods
        deleted, its Secret, its pods (one the plane cannot write fails its replica alone)."""
        for namespace, name in earlier:
            self._delete_pod(client, namespace, name)
        plans = made.pods
        there = partial(self._namespace_there, plans[0][0].namespace, namespace_made_now)
        if made.secret is not None:
            with there(), exists_ok():
                client.create(RawSecret.from_dict(made.secret), namespace=plans[0][0].namespace)
        for plan, node in plans:
            try:
                pod = build_pod(plan)
            except RequestError as exc:
                r = ReplicaReport(
                    job_id=start.job,
                    replica=plan.replica,
                    state=ReplicaState.FAILED,
                    attempt=start.attempt,
                    reason=f"site {self.config.name}: {exc}",
                )
                self._send(node, r)
                continue
            with there(), exists_ok():
                client.create(RawPod.from_dict(pod), namespace=plan.namespace)
            log.info(
                "site %s: pod %s/%s created",
                self.config.name,
                plan.namespace,
                pod_name(start.job, plan.replica, start.attempt),
            )
