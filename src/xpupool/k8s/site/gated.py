"""Pods the plane did not create, under the same queues (issue 49, part 3; docs/kubernetes.md,
"kubectl users and the gate").

A pod created with kubectl (or by any controller) in a tenant's namespace and labelled
``xpupool.io/queue: NAME`` carries the scheduling gate :data:`GATE` (the chart's
MutatingAdmissionPolicy adds it, or its user writes it), so kube-scheduler leaves it alone. The
site reads its request off its resources and annotations with the extender's codec
(``k8s/codec/pod_request.py``: HAMi's and xpupool's resource names and annotations) and submits
it as a job of the namespace's tenant through the one submission path (``services/jobs.py``):
the same checks, the same queue, quotas, borrowing and priority grants, the same scheduling
cycle. A refused one gets a Kubernetes Event with the API's words and stays gated: nothing is
admitted. When the cycle admits the job (the site's ``start``), the site counts the run and
removes the gate with a JSON patch that tests and removes that one gate (the chart's
ValidatingAdmissionPolicy allows the plane nothing else); kube-scheduler and the extender then
place the pod, and its phases become the job's replica reports as the plane's own pods' do. A
gated pod deleted by its user cancels its job; a job cancelled or preempted through the plane
deletes its pod.

Which job stands for which pod is stored (``storage/site_pods.py``), never read from anything a
tenant writes. A pod is one job of one replica, except one owner's pods of a PodGroup, which are
one gang job of a replica each (``gated_gangs.py``): admitted together or not at all.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from lightkube import Client, operators
from lightkube.config.kubeconfig import SingleConfig
from lightkube.core.exceptions import ApiError
from lightkube.core.resource import ApiInfo, ResourceDef
from lightkube.generic_resource import GenericNamespacedResource
from lightkube.types import PatchType
from pydantic import ValidationError
from sqlalchemy import Connection

from xpupool.k8s.codec.pod_request import ANNOTATION_QUEUE, pod_cpu_memory, pod_demand
from xpupool.k8s.codec.resource_names import DeviceKind
from xpupool.k8s.informers.kubeconfig import RawPod
from xpupool.k8s.informers.pod_groups import PodGroupSizes, lightkube_podgroup_getter
from xpupool.k8s.informers.watch import Event, EventType, Informer
from xpupool.k8s.site.gated_gangs import FormingGangs
from xpupool.k8s.site.pods import JOB, QUEUE, pod_status
from xpupool.k8s.site.pods import report as pod_report
from xpupool.k8s.site.pods import waiting as waiting_note
from xpupool.k8s.site.sites_file import KubernetesSiteConfig
from xpupool.model.errors import RequestError, XpupoolError
from xpupool.model.request import Request
from xpupool.model.request_model import RequestModel
from xpupool.model.validation import request_error
from xpupool.server.job_views import Submitted
from xpupool.server.plane import site_pod_rows
from xpupool.server.plane.site_pod_rows import PodJob
from xpupool.server.plane.site_runs import SiteReport
from xpupool.server.schemas.agent_protocol import (
    ReplicaReport,
    ReplicaState,
)
from xpupool.server.schemas.jobs import JobIn
from xpupool.server.services import jobs
from xpupool.server.services.services import as_tenant

if TYPE_CHECKING:
    from xpupool.server.plane import ControlPlane

__all__ = [
    "GATE",
    "GatedPod",
    "GatedPods",
    "event_object",
    "gate_patch",
    "has_gate",
    "job_of_pod",
    "read_gated_pod",
    "tenant_of_namespace",
]

log = logging.getLogger(__name__)

GATE = "xpupool.io/admission"
EVENT_REASON = "NotAdmitted"
COMPONENT = "xpupool-plane"
MAX_EVENT_CHARS = 1024  # an Event's message as kube truncates notes (events.k8s.io: 1 KiB)
_VERBS = ["delete", "get", "list", "post"]


class RawEvent(GenericNamespacedResource):
    _api_info = ApiInfo(resource=ResourceDef("", "v1", "Event"), plural="events", verbs=_VERBS)


@dataclass(frozen=True, slots=True)
class GatedPod:
    """A gated pod as the plane submits it: where it is, what runs, what it asks for."""

    namespace: str
    name: str
    uid: str
    queue: str
    image: str
    request: Request


def has_gate(obj: Mapping[str, Any]) -> bool:
    """Does the pod carry :data:`GATE` (kube-scheduler waits for the plane)?"""
    spec = obj.get("spec")
    gates = spec.get("schedulingGates") if isinstance(spec, Mapping) else None
    return isinstance(gates, list) and any(
        isinstance(g, Mapping) and g.get("name") == GATE for g in gates
    )


def read_gated_pod(obj: Mapping[str, Any], site: str) -> GatedPod:
    """A labelled pod as the job the plane submits for it on ``site``: one replica whose request
    is the pod's device container's (HAMi's and xpupool's resource names and annotations, read as
    the extender reads them) with the pod's CPU and memory as kube-scheduler counts them, in the
    queue its label names. Raises :class:`RequestError` naming the pod's field: a bad quantity or
    annotation, two containers asking for devices (one per gated pod), an annotation naming
    another queue or site, no image."""
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        raise RequestError("metadata", None, "expected an object")
    labels = meta.get("labels") or {}
    queue = labels.get(QUEUE) if isinstance(labels, Mapping) else None
    if not isinstance(queue, str) or not queue:
        raise RequestError(f'metadata.labels["{QUEUE}"]', queue, "names the queue; none given")
    demand = pod_demand(obj)
    if len(demand.demands) > 1:
        names = [d.name for d in demand.demands]
        why = "a gated pod may have one container that asks for devices"
        raise RequestError("spec.containers", names, why)
    cpu_milli, memory_mib = pod_cpu_memory(obj)
    req = Request()
    if demand.demands:
        req = demand.demands[0].request
        _expressible(demand.demands[0].kind, req)
    annotations = meta.get("annotations") or {}
    asked_queue = annotations.get(ANNOTATION_QUEUE) if isinstance(annotations, Mapping) else None
    if asked_queue is not None and asked_queue != queue:
        field = f'metadata.annotations["{ANNOTATION_QUEUE}"]'
        raise RequestError(field, asked_queue, f"the pod's label names queue {queue!r}")
    if req.queue not in ("default", queue):
        raise RequestError("metadata.annotations", req.queue, f"the label names queue {queue!r}")
    if any(s != site for s in req.sites) or site in req.exclude_sites:
        why = f"a pod on site {site} runs there: it may not name another site"
        raise RequestError('metadata.annotations["xpupool.io/site"]', list(req.sites), why)
    spec = obj.get("spec")
    containers = spec.get("containers") if isinstance(spec, Mapping) else None
    first = containers[0] if isinstance(containers, list) and containers else None
    image = first.get("image") if isinstance(first, Mapping) else None
    if not isinstance(image, str) or not image:
        raise RequestError("spec.containers[0].image", image, "a pod runs an image; none given")
    req = replace(
        req,
        name="",
        queue=queue,
        sites=(site,),
        cpu_milli=cpu_milli,
        memory_mib=memory_mib,
        replicas=1,
        gang=False,
    )
    return GatedPod(demand.namespace, demand.name, demand.uid, queue, image, req)


def _expressible(kind: DeviceKind, req: Request) -> None:
    """A job's request holds card models, not HAMi's substrings of a card's type: a pod that
    asks by those is refused (admitting it under no model would charge the wrong quota flavor),
    naming the annotation and what to write instead."""
    for key, given in (
        (kind.use_type_key, req.devices.type_contains),
        (kind.nouse_type_key, req.devices.exclude_type_contains),
    ):
        if given:
            why = (
                "a gated pod names card models in xpupool.io/request (devices.models), "
                "not HAMi's card type substrings"
            )
            raise RequestError(f'metadata.annotations["{key}"]', ",".join(given), why)


def job_of_pod(pod: GatedPod, tenant: str, name: str | None = None) -> JobIn:
    """The submission that stands for ``pod`` (``name``: ``pod NAMESPACE/NAME`` unless given):
    run once (its controller, if any, makes the next pod), failed rather than requeued when its
    node goes (a pod is bound once)."""
    try:
        return JobIn.model_validate(
            {
                "name": (name or f"pod {pod.namespace}/{pod.name}")[:200],
                "image": pod.image,
                "request": RequestModel.from_request(pod.request).dump(),
                "queue": pod.queue,
                "tenant": tenant,
                "max_retries": 0,
                "retry_on": [],
                "on_node_lost": "fail",
            }
        )
    except ValidationError as exc:
        raise request_error(exc, "pod") from None


def tenant_of_namespace(config: KubernetesSiteConfig, namespace: str) -> str | None:
    """The tenant whose namespace ``namespace`` is on this site (the fixed mapping first, then
    the prefix), or None: not a tenant's, the plane leaves its pods alone."""
    for tenant, ns in config.namespaces.items():
        if ns == namespace:
            return tenant
    prefix = config.namespace_prefix
    if prefix and namespace.startswith(prefix) and len(namespace) > len(prefix):
        tenant = namespace[len(prefix) :]
        return None if tenant in config.namespaces else tenant
    return None


def gate_patch(obj: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """The JSON patch that removes :data:`GATE` from the pod and nothing else: a ``test`` of the
    gate's name at its index, then its removal (so a pod whose gates changed in between is
    refused, 422, not patched wrongly). None when the pod has no such gate."""
    spec = obj.get("spec")
    gates = spec.get("schedulingGates") if isinstance(spec, Mapping) else None
    for i, g in enumerate(gates if isinstance(gates, list) else []):
        if isinstance(g, Mapping) and g.get("name") == GATE:
            path = f"/spec/schedulingGates/{i}"
            return [
                {"op": "test", "path": f"{path}/name", "value": GATE},
                {"op": "remove", "path": path},
            ]
    return None


def event_object(pod: Mapping[str, str], message: str, site: str) -> dict[str, Any]:
    """A Warning Event on ``pod`` (namespace, name, uid) saying why the plane does not admit it,
    as ``kubectl describe pod`` shows it."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{pod['name'][:200]}.", "namespace": pod["namespace"]},
        "involvedObject": {
            "apiVersion": "v1",
            "kind": "Pod",
            "namespace": pod["namespace"],
            "name": pod["name"],
            "uid": pod["uid"],
        },
        "reason": EVENT_REASON,
        "message": message[:MAX_EVENT_CHARS],
        "type": "Warning",
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "reportingInstance": site,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }


@dataclass(frozen=True, slots=True)
class GatedTask:
    """Work for the site's worker thread: ``kind`` is ``event`` (the refusal ``message`` on the
    pod), ``admit`` (count the run ``attempt`` of ``job`` and remove the gate) or ``delete``."""

    kind: str
    namespace: str
    name: str
    uid: str = ""
    message: str = ""
    job: int = 0
    attempt: int = 0


class GatedPods:
    """The labelled pods of one site that the plane did not create: their jobs, their gates.
    The informer's thread submits and reports; the site's worker thread (``do``) acts on the
    cluster. ``send`` takes one replica report, ``send_all`` many reports and waiting notes
    (a list's) in a write per chunk: the site's."""

    def __init__(
        self,
        config: KubernetesSiteConfig,
        put: Callable[[GatedTask], None],
        send: Callable[[str, ReplicaReport], None],
        send_all: Callable[[Sequence[SiteReport]], None] = lambda reports: None,
    ) -> None:
        self.config = config
        self._put = put
        self._send = send
        self._send_all = send_all
        self._plane: ControlPlane | None = None
        self._client: Client | None = None
        self._lock = threading.Lock()  # held across a submission and its row: owns() waits
        self._by_uid: dict[str, PodJob] = {}
        self._by_job: dict[int, list[PodJob]] = {}  # its pods by replica (a gang's: several)
        self._gangs = FormingGangs(self._group_size)
        self._refused: dict[str, str] = {}  # uid -> the refusal its Event said
        self._waiting: dict[str, str] = {}  # uid -> the unbound pod's reason noted
        self._sizes: PodGroupSizes | None = None

    @property
    def site(self) -> str:
        return self.config.name

    def attach(self, plane: ControlPlane, client: Client, config: SingleConfig) -> Informer[Any]:
        """Read the stored pod jobs of this site and watch its labelled pods (not the plane's
        own, which carry :data:`~xpupool.k8s.site.pods.JOB`); returns the informer, started. A
        list's pods are taken together (:meth:`on_pods`), and so are a watch's that queued up
        behind one another (``coalesce``: a burst of kubectl users' pods was a submission, a
        store write, each)."""
        self.bind(plane, client)
        informer: Informer[dict[str, Any]] = Informer(
            config,
            RawPod,
            lambda obj: obj,
            self.on_pod,
            labels={QUEUE: operators.exists(), JOB: operators.not_exists()},
            name=f"site-{self.site}-gated",
            listed=self.on_pods,
            coalesce=True,
        )
        informer.start()
        threading.Thread(
            target=self._reap_when_synced,
            args=(informer,),
            name=f"site-{self.site}-reap",
            daemon=True,
        ).start()
        return informer

    def _reap_when_synced(self, informer: Informer[Any]) -> None:
        while not informer.wait_synced(1.0):
            if informer.stopped:
                return
        self.reap_missing(informer.uids)

    def reap_missing(self, present: Callable[[], set[str]]) -> None:
        """Pods the plane has jobs for that the cluster no longer has, once the watch has listed
        everything: deleted while the plane was down, they get what their deletion would have
        given (a waiting job cancelled, a running one's replica ended), and are forgotten.
        ``present`` is read after the known pods, so a pod admitted meanwhile (listed, then
        known) is never taken for a missing one."""
        with self._lock:
            known = list(self._by_uid.values())
        there = present()
        for one in known:
            if one.uid not in there:
                log.info(
                    "site %s: pod %s/%s of job %d is gone",
                    self.site,
                    one.namespace,
                    one.name,
                    one.job,
                )
                self._follow(one, {}, gone=True)

    def use_client(self, client: Client) -> None:
        """Act through ``client`` from now on (the site's credentials were rotated; its
        informer is the site's to reconfigure)."""
        self._client, self._sizes = client, None

    def bind(self, plane: ControlPlane, client: Client | None) -> None:
        """Serve ``plane`` (acting on the cluster through ``client``): read the stored pod jobs
        of this site. :meth:`attach` calls it; a test without a cluster calls it alone and
        drives :meth:`on_pod` itself."""
        self._plane, self._client = plane, client
        with plane.db.connect() as conn:
            for known in site_pod_rows.known(conn, self.site):
                self._remember(known)

    def owns(self, job: int) -> bool:
        """Does ``job`` stand for a pod the plane did not create?"""
        with self._lock:
            return job in self._by_job

    def job_of_uid(self, uid: str) -> tuple[int, int] | None:
        """(job, replica) the pod of ``uid`` stands for (its job counts its cards), or None."""
        with self._lock:
            known = self._by_uid.get(uid)
            return None if known is None else (known.job, known.replica)

    def _remember(self, known: PodJob) -> None:
        self._by_uid[known.uid] = known
        members = [m for m in self._by_job.get(known.job, []) if m.replica != known.replica]
        self._by_job[known.job] = sorted([*members, known], key=lambda m: m.replica)

    def _members(self, job: int) -> list[PodJob]:
        with self._lock:
            return list(self._by_job.get(job, []))

    def _group_size(self, namespace: str, name: str) -> int:
        """A PodGroup's minMember, read with the extender's reader on the site's client."""
        if self._sizes is None:
            client = self._client
            if client is None:
                raise RequestError("PodGroup", f"{namespace}/{name}", "no cluster to read it from")
            self._sizes = PodGroupSizes(lightkube_podgroup_getter(client))
        return self._sizes(namespace, name)

    # ------------------------------------------------------------------ the informer's thread
    def on_pods(self, events: Sequence[Event[dict[str, Any]]]) -> None:
        """A list's pods (the first after a restart: every pod the plane has a job for), or a
        batch of the watch's events, each taken as :meth:`on_pod` takes it: the new gated pods
        (a gang's aside) submitted together in one write (:meth:`_submit_all`), the reports and
        waiting notes of those still there sent together, a write per chunk (one each was a
        write each). A pod gone is taken alone: what its job becomes decides whether the pair
        is forgotten."""
        reports: list[SiteReport] = []
        submits: list[tuple[Mapping[str, Any], str]] = []
        pending: set[str] = set()  # uids of the pods in ``submits``
        for event in events:
            if event.uid in pending:  # a pod's later event: after its submission, as alone
                self._submit_together(submits)
                submits.clear()
                pending.clear()
            before = len(submits)
            try:
                self.on_pod(event, reports, submits)
            except Exception:  # one pod is not worth the others' reports
                log.exception("site %s: pod %s %s", self.site, event.key, event.type)
            if len(submits) > before:
                pending.add(event.uid)
        self._submit_together(submits)
        if not reports:
            return
        try:
            self._send_all(reports)
        except XpupoolError as exc:
            log.warning(
                "site %s: %d reports of a pod list refused: %s", self.site, len(reports), exc
            )

    def on_pod(
        self,
        event: Event[dict[str, Any]],
        reports: list[SiteReport] | None = None,
        submits: list[tuple[Mapping[str, Any], str]] | None = None,
    ) -> None:
        """The informer's consumer: a labelled pod not of the plane's, added, changed or gone;
        what a pod still there says is sent at once, or added to ``reports`` (a batch's); a new
        gated pod (not a gang's) is submitted at once, or added to ``submits`` (a batch's, with
        its tenant)."""
        obj = event.value
        meta = obj.get("metadata") or {}
        uid, namespace = str(meta.get("uid", "")), str(meta.get("namespace", ""))
        known = self._by_uid.get(uid)
        if known is not None:
            gone = event.type is EventType.DELETED
            self._follow(known, obj, gone=gone, reports=None if gone else reports)
            return
        if event.type is EventType.DELETED or not has_gate(obj):
            self._refused.pop(uid, None)
            self._gangs.drop(uid)
            return  # not gated (its gate removed by someone else): a plain pod
        tenant = tenant_of_namespace(self.config, namespace)
        if tenant is None or uid in self._refused or self._gangs.holds(uid):
            return
        try:
            claim = self._gangs.claim(obj)
            members = None if claim is None else self._gangs.add(claim, obj)
        except RequestError as exc:
            self._refuse({k: str(meta.get(k, "")) for k in ("namespace", "name", "uid")}, exc)
            return
        if claim is None and submits is not None:
            submits.append((obj, tenant))
        elif claim is None:
            self._submit_all([(obj, tenant)])
        elif members is not None:
            self._submit_gang(claim.name, members, tenant)

    def _submit_together(self, pods: Sequence[tuple[Mapping[str, Any], str]]) -> None:
        """:meth:`_submit_all` for a batch's pods: a store that fails is logged (no pod of the
        batch was stored; each one's next event tries again), the batch's reports still go."""
        if not pods:
            return
        try:
            self._submit_all(pods)
        except Exception:
            log.exception("site %s: %d pods not submitted", self.site, len(pods))

    def _submit_all(self, pods: Sequence[tuple[Mapping[str, Any], str]]) -> None:
        """New gated pods, ``(object, tenant)``, each submitted as the job that stands for it,
        with the row naming its pod, all in one store transaction (``jobs.submit_many``: a
        refused one is refused alone, an Event saying why). Each row is matched to its pod by
        the job's name (``pod NAMESPACE/NAME``); the pods whose name another of the batch has
        (names are cut at 200 characters) are submitted after them, in a batch of their own.
        A store that fails raises its error, once the refused pods have their Events."""
        plane = self._plane
        assert plane is not None
        alone: list[tuple[Mapping[str, Any], str]] = []
        with self._lock:
            named: dict[str, tuple[GatedPod, dict[str, str]]] = {}
            asks = []
            for obj, tenant in pods:
                meta = obj.get("metadata") or {}
                where = {k: str(meta.get(k, "")) for k in ("namespace", "name", "uid")}
                try:
                    pod = read_gated_pod(obj, self.site)
                    body = job_of_pod(pod, tenant)
                except XpupoolError as exc:
                    self._refuse(where, exc)
                    continue
                name = str(body.name)
                if name in named:
                    alone.append((obj, tenant))
                    continue
                named[name] = (pod, where)
                asks.append((as_tenant(tenant), body))

            def row(conn: Connection, stored: Submitted) -> None:
                pod, _ = named[str(stored.row["name"])]
                known = PodJob(int(stored.row["id"]), pod.namespace, pod.name, pod.uid)
                site_pod_rows.remember(conn, self.site, known)

            answers = jobs.submit_many(plane, asks, then=row) if asks else []
            failed: Exception | None = None  # the store's: nothing of the batch was stored
            for (pod, where), answer in zip(named.values(), answers, strict=True):
                if isinstance(answer, XpupoolError):
                    self._refuse(where, answer)
                elif isinstance(answer, Exception):  # not stored; its next event tries again
                    failed = answer
                else:
                    job_id = int(answer.row["id"])
                    self._remember(PodJob(job_id, pod.namespace, pod.name, pod.uid))
                    log.info(
                        "site %s: pod %s/%s is job %d", self.site, pod.namespace, pod.name, job_id
                    )
        if alone:
            self._submit_all(alone)
        if failed is not None:
            raise failed

    def _refuse(self, where: Mapping[str, str], exc: XpupoolError) -> None:
        """The pod stays gated, no job made; an Event says why (once per refusal)."""
        why = f"xpupool site {self.site}: not admitted: {exc}"
        self._refused[where["uid"]] = why
        log.info(
            "site %s: pod %s/%s refused: %s", self.site, where["namespace"], where["name"], exc
        )
        self._put(GatedTask("event", where["namespace"], where["name"], where["uid"], why))

    def _submit_gang(self, group: str, objs: list[Mapping[str, Any]], tenant: str) -> None:
        """One job of ``len(objs)`` replicas with ``gang`` set, replica i for ``objs[i]``: every
        member asks for the same (its request and queue), or all are refused."""
        plane = self._plane
        assert plane is not None
        wheres = [
            {k: str((o.get("metadata") or {}).get(k, "")) for k in ("namespace", "name", "uid")}
            for o in objs
        ]
        namespace = wheres[0]["namespace"]
        with self._lock:
            try:
                pods = [read_gated_pod(o, self.site) for o in objs]
                first = pods[0]
                for other in pods[1:]:
                    if (other.request, other.queue) != (first.request, first.queue):
                        why = (
                            f"PodGroup {namespace}/{group}'s pods are one gang: "
                            f"they must ask for the same as pod {first.name}"
                        )
                        raise RequestError("spec.containers", other.name, why)
                gang = replace(first, request=replace(first.request, replicas=len(pods), gang=True))
                members = [
                    PodJob(0, p.namespace, p.name, p.uid, replica=i) for i, p in enumerate(pods)
                ]

                def rows(conn: Connection, stored: Submitted) -> None:
                    for m in members:
                        site_pod_rows.remember(
                            conn, self.site, replace(m, job=int(stored.row["id"]))
                        )

                body = job_of_pod(gang, tenant, name=f"pods {namespace}/{group}")
                job = jobs.submit(plane, as_tenant(tenant), body, then=rows)
            except XpupoolError as exc:
                for where in wheres:
                    self._refuse(where, exc)
                return
            for m in members:
                self._remember(replace(m, job=job.id))
        log.info(
            "site %s: %d pods of PodGroup %s/%s are gang job %d",
            self.site,
            len(members),
            namespace,
            group,
            job.id,
        )

    def _follow(
        self,
        known: PodJob,
        obj: Mapping[str, Any],
        *,
        gone: bool,
        reports: list[SiteReport] | None = None,
    ) -> None:
        """A pod the plane has a job for changed (or went): its phase as the job's replica
        report (sent, or added to ``reports``); deleted by its user, the job is cancelled first
        (so it ends cancelled). Once the pod is gone and its job final, the plane forgets the
        pair (its row too)."""
        self._report(known, obj, gone=gone, reports=reports)
        plane = self._plane
        assert plane is not None
        if gone and known.job not in plane.queued and plane.held_run(known.job) is None:
            with self._lock:
                self._by_uid.pop(known.uid, None)
                left = [m for m in self._by_job.get(known.job, []) if m.uid != known.uid]
                if left:
                    self._by_job[known.job] = left
                else:
                    self._by_job.pop(known.job, None)
            if not left:  # a gang's rows go with its last pod
                site_pod_rows.forget(plane, known.job)

    def _report(
        self,
        known: PodJob,
        obj: Mapping[str, Any],
        *,
        gone: bool,
        reports: list[SiteReport] | None = None,
    ) -> None:
        plane = self._plane
        assert plane is not None
        run = plane.held_run(known.job)
        pending = run is None
        if run is not None:
            node = run.node_of(known.replica)
            attempt, stopping, final = run.attempt, run.stopping, known.replica in run.final
        if gone:
            self._waiting.pop(known.uid, None)
        if gone and (pending or not stopping):
            with contextlib.suppress(XpupoolError):  # already final
                jobs.cancel(plane, as_tenant(self._tenant(known)), known.job)
            stopping = True
        if pending or node is None or attempt == 0 or final:
            return
        try:
            state = pod_status(obj, job=known.job, replica=known.replica, attempt=attempt)
        except RequestError:
            return
        said: list[SiteReport] = []
        if not gone and state.waiting and self._waiting.get(known.uid) != state.waiting:
            self._waiting[known.uid] = state.waiting
            said.append(waiting_note(state, self.site))
        r = pod_report(state, gone=gone, stopping=stopping)
        if reports is not None:
            reports.extend(said)
            if r is not None:
                reports.append((node, r))
            return
        if said:
            self._send_all(said)
        if r is not None:
            self._send(node, r)

    def _tenant(self, known: PodJob) -> str:
        return tenant_of_namespace(self.config, known.namespace) or ""

    # ------------------------------------------------------------------ the site's calls
    def start(self, job: int, attempt: int) -> GatedTask:
        known = self._members(job)[0]
        return GatedTask("admit", known.namespace, known.name, known.uid, job=job, attempt=attempt)

    def stop(self, job: int) -> GatedTask:
        known = self._members(job)[0]
        return GatedTask("delete", known.namespace, known.name, known.uid, job=job)

    # ------------------------------------------------------------------ the worker's thread
    def do(self, task: GatedTask) -> None:
        """Act on the cluster for ``task`` (ApiErrors other than 404 go to the site's retry)."""
        client = self._client
        assert client is not None
        if task.kind == "event":
            body = event_object(
                {"namespace": task.namespace, "name": task.name, "uid": task.uid},
                task.message,
                self.site,
            )
            client.create(RawEvent.from_dict(body), namespace=task.namespace)
        elif task.kind == "delete":  # every pod of the job (a gang's all)
            for member in self._members(task.job):
                try:
                    client.delete(RawPod, member.name, namespace=member.namespace)
                except ApiError as exc:
                    if exc.status.code != 404:
                        raise
                    self._vanished(member)
        else:
            self._admit(task)

    def _admit(self, task: GatedTask) -> None:
        """Count the run and remove the gate of each of the job's pods (a gang's all). The run
        is counted first (a crash in between: the restarted plane's reconciliation removes the
        gates of a counted run still gated)."""
        plane, client = self._plane, self._client
        assert plane is not None and client is not None
        members = self._members(task.job)
        names = ", ".join(f"{m.namespace}/{m.name}" for m in members[:8])
        pods = "pod" if len(members) == 1 else "pods"
        why = f"attempt {task.attempt}: the gate of {pods} {names} removed"
        if plane.count_run(task.job, task.attempt, lambda _: f"{why} on site {self.site}") is None:
            return
        for member in members:
            try:
                obj = dict(client.get(RawPod, member.name, namespace=member.namespace))
            except ApiError as exc:
                if exc.status.code != 404:
                    raise
                self._vanished(member)
                continue
            if str((obj.get("metadata") or {}).get("uid", "")) != member.uid:
                self._vanished(member)  # deleted, and another made under its name
                continue
            ops = gate_patch(obj)
            if ops is not None:
                log.info(
                    "site %s: pod %s/%s admitted, its gate removed",
                    self.site,
                    member.namespace,
                    member.name,
                )
                client.patch(
                    RawPod, member.name, ops, namespace=member.namespace, patch_type=PatchType.JSON
                )

    def _vanished(self, known: PodJob) -> None:
        """The pod is gone with no deletion seen (deleted while the plane was down, or before
        its stop): its job is cancelled (a gang's whole), its replica reported stopped."""
        plane = self._plane
        assert plane is not None
        with contextlib.suppress(XpupoolError):  # already final
            jobs.cancel(plane, as_tenant(self._tenant(known)), known.job)
        run = plane.held_run(known.job)
        node = None if run is None else run.node_of(known.replica)
        attempt = 0 if run is None else run.attempt
        if node is not None and attempt:
            r = ReplicaReport(
                job_id=known.job,
                replica=known.replica,
                attempt=attempt,
                state=ReplicaState.STOPPED,
                reason=f"pod {known.namespace}/{known.name} is gone",
            )
            self._send(node, r)

    def reconcile(self, job: int, attempt: int) -> GatedTask:
        """A held job after a restart: admitted again (the gate removed if still there; the
        run counted if it never was)."""
        known = self._members(job)[0]
        return GatedTask(
            "admit", known.namespace, known.name, known.uid, job=job, attempt=max(attempt, 1)
        )
