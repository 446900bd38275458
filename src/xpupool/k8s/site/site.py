"""A Kubernetes cluster as a site of the plane (docs/sites.md, docs/kubernetes.md).

The site watches the cluster's Nodes and its own Pods on its own threads (the informers of
``k8s/informers/watch.py``), and acts on the cluster from one worker thread (which makes the
pods of runs started one after another at once, on a bounded pool: ``creations.py``); the plane's
calls (:meth:`KubernetesSite.start`, ``stop``, ``adopt``, made under the plane's lock) only queue
work for that thread, so no plane operation waits on the network.

- Nodes: decoded as the extender's cluster view decodes them (HAMi's registration annotations,
  xpupool's device annotation, ``status.allocatable``), plus ``spec.taints`` and
  ``spec.unschedulable``, checked as strictly as an agent's registration (a node name the plane's
  book can hold, bounded counts), then registered through ``services/fleet.register_many`` with
  this site's ``source`` (a known one whose cards, capacity, labels or taints change is registered
  again through the plane's ``register``, draining); the node's ``site`` is the site's name, so
  ``site=NAME`` in a request names it. A node whose name another site's node has is refused and
  logged: one site's objects never change another's.
- Pods: the plane's own (labelled ``xpupool.io/job``), each a replica of a job in a run
  (``pods.py``). Their phases become the agent protocol's replica reports, sent through the
  heartbeat service (``services/agents.py``) under the node the plane placed the replica on, so
  a job's lifecycle is the one agent jobs have.
- Kubectl users' pods: labelled ``xpupool.io/queue`` and gated, submitted as jobs and their gate
  removed on admission (``gated.py``); ``start``, ``stop`` and ``adopt`` of their jobs go there.
- Logs: each of its pods that runs or ran has its log followed through the API server into the
  replica's log on the plane (``pod_logs.py``), as an agent uploads it.
- Services: a service whose job names this site is a Deployment plus a Service, kept by
  ``site_services.py`` on its own thread as the plane's service controller wants them
  (:meth:`KubernetesSite.want_services`); their ready endpoints come from EndpointSlices.
- Work: ``start`` counts the run (the job's next attempt, which names its pods) and creates one
  pod per replica; ``stop`` deletes them (their grace period), the job's cards staying held until
  the pods are gone; ``adopt`` (a restarted plane) reads the pods of its held jobs from the pod
  watch's first list (``seen_pods.py``; no list of its own): a pod of an older attempt is
  deleted, a missing one of a running job is a lost replica, a job counted but never made gets
  its pods (idempotent names: nothing is created twice).
- Reachability: the site's nodes are heard while its API server answers its watches
  (:meth:`KubernetesSite.answering`, asked by the plane's lost-node watch:
  ``server/site_health.hear``); when none of them has had an answer for longer than the plane's
  ``lost_after_s``, its nodes are lost and the site unreachable, by the rule an agent site's
  silent nodes follow, and it is reachable again as soon as a watch is answered.
- Credentials: the sites file's kubeconfig, or the admin's secret that holds it
  (``credentials.py``); when the admin sets that secret again, the worker reads it and the
  informers, the worker's and the log streams' clients and the services' switch to it in place
  (:meth:`KubernetesSite.secret_changed`), each informer listing again, so no job, pod or event
  is lost to a rotation.
- Power: with ``node_metrics`` in the sites file, the cards' power samples are read from the
  node agents' metrics on a thread of its own (``node_power.py``), each agent found by the URL
  template or in its Service's EndpointSlices, watched as the site's other objects are
  (``agent_endpoints.py``).
- Finished jobs: the Secret of a job whose run ended is deleted at once, its pods after the sites
  file's ``finished_pods_retention_s`` (``finished.py``); the worker looks at every job's leftovers
  when the site is attached (a restarted plane: what ended while it was down) and every
  ``resync_s``, and at a job's when one of its pods ends and the plane holds the job no more.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import re
import threading
import time
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from lightkube import Client, operators
from lightkube.config.kubeconfig import SingleConfig
from lightkube.core.exceptions import ApiError

from xpupool.engine.host import HostedNode
from xpupool.engine.link_domains import labelled
from xpupool.k8s.informers.decoders import decode_node
from xpupool.k8s.informers.kubeconfig import RawNode, RawPod, make_client
from xpupool.k8s.informers.watch import Event, EventType, Informer, backoff_s
from xpupool.k8s.site import api_errors
from xpupool.k8s.site.api_errors import gone_ok
from xpupool.k8s.site.cluster_objects import RawSecret
from xpupool.k8s.site.creations import MAX_BATCH, RunPods, Start, take_batch
from xpupool.k8s.site.credentials import read_credentials
from xpupool.k8s.site.finished import FinishedJobs
from xpupool.k8s.site.foreign import ForeignPods
from xpupool.k8s.site.gated import GatedPods, GatedTask
from xpupool.k8s.site.labelled_pods import SitePod, site_pod, with_label, without_label
from xpupool.k8s.site.node_power import NodePower
from xpupool.k8s.site.pod_logs import LogTarget, PodLogs
from xpupool.k8s.site.pods import (
    JOB,
    SITE,
    TERMINAL,
    PodState,
    pod_name,
)
from xpupool.k8s.site.pods import report as pod_report
from xpupool.k8s.site.pods import waiting as waiting_note
from xpupool.k8s.site.seen_pods import NotListedError, SeenPods
from xpupool.k8s.site.site_services import SiteServices
from xpupool.k8s.site.sites_file import KubernetesSiteConfig
from xpupool.model.allocation import Allocation
from xpupool.model.device import Node
from xpupool.model.errors import Conflict, NotFound, RequestError, XpupoolError
from xpupool.model.taint import Taint, parse_effect
from xpupool.server.plane import site_runs
from xpupool.server.plane.records import RunView
from xpupool.server.plane.site_runs import SiteReport
from xpupool.server.schemas.agent_protocol import (
    Heartbeat,
    ReplicaReport,
    ReplicaState,
)
from xpupool.server.schemas.jobs import JobPhase
from xpupool.server.schemas.nodes import NodeStatus
from xpupool.server.service_endpoints import Endpoint
from xpupool.server.service_sites import ServiceKey, ServiceWant
from xpupool.server.services import agents, fleet

if TYPE_CHECKING:
    from xpupool.server.plane import ControlPlane, HeldJob, NodeRecord

log = logging.getLogger(__name__)

KIND = "kubernetes"
RUNTIME = "kubernetes"  # the node's container runtime as the engine sees it: it runs images
_NODE_NAME = re.compile(r"^[a-z0-9]([a-z0-9.-]{0,61}[a-z0-9])?$")  # the node book holds 63
MAX_TAINTS = 64
REPORT_CHUNK = 500  # a restart's reports of its pods applied in one write
LISTED_WAIT_S = 5.0  # a restart's reconciliation waits that long for the pod watch's first list


@dataclass(frozen=True, slots=True)
class SiteNode:
    """A Node of the cluster as the site reads it: the pool's record, or None (no managed card)."""

    node: Node | None


@dataclass(frozen=True, slots=True)
class _Stop:
    job: int


@dataclass(frozen=True, slots=True, repr=False)
class _Adopt:
    jobs: tuple[int, ...]

    def __repr__(self) -> str:  # in the worker's log lines: 10,000 ids after a large restart
        return f"_Adopt({len(self.jobs)} jobs)"


@dataclass(frozen=True, slots=True)
class _DeletePod:
    namespace: str
    name: str


@dataclass(frozen=True, slots=True)
class _Sweep:
    """Look for finished jobs' leftovers: of ``job``, or of every job when None."""

    job: int | None


@dataclass(frozen=True, slots=True)
class _Due:
    """Delete the pods of finished jobs whose retention has passed."""


@dataclass(frozen=True, slots=True)
class _Rotate:
    """The admin set the site's ``kubeconfig_secret`` again: read it and switch to it."""


_Task = Start | _Stop | _Adopt | _DeletePod | _Sweep | _Due | _Rotate | GatedTask


def read_node(obj: Mapping[str, Any], site: str) -> SiteNode:
    """A Node object as this site registers it. Raises :class:`RequestError` naming the field
    for what the plane's book cannot hold (the informer then treats the node as absent)."""
    node = decode_node(obj)
    if node is None:
        return SiteNode(None)
    if not _NODE_NAME.fullmatch(node.name):
        raise RequestError("metadata.name", node.name[:80], "a node name of at most 63 characters")
    spec = obj.get("spec") or {}
    if not isinstance(spec, Mapping):
        raise RequestError("spec", repr(spec)[:80], "expected an object")
    raw = spec.get("taints") or []
    if not isinstance(raw, list) or len(raw) > MAX_TAINTS:
        raise RequestError("spec.taints", repr(raw)[:80], f"a list of at most {MAX_TAINTS}")
    taints: dict[tuple[str, str], Taint] = {}
    for i, t in enumerate(raw):
        if not isinstance(t, Mapping):
            raise RequestError(f"spec.taints[{i}]", repr(t)[:80], "expected an object")
        taint = Taint(
            str(t.get("key", "")),
            str(t.get("value") or ""),
            parse_effect(f"spec.taints[{i}].effect", t.get("effect")),
        )
        taints.setdefault((taint.key, taint.effect.value), taint)
    unschedulable = spec.get("unschedulable", False) is True
    return SiteNode(
        replace(
            node,
            site=site,
            container_runtime=RUNTIME,
            taints=tuple(taints.values()),
            schedulable=not unschedulable,
        )
    )


class KubernetesSite:
    """One Kubernetes cluster behind :class:`~xpupool.server.sites.protocol.Site`."""

    def __init__(self, config: KubernetesSiteConfig, *, resync_s: float = 300.0) -> None:
        self.config = config
        self.source = f"{KIND}:{config.name}"
        self.resync_s = resync_s
        self._plane: ControlPlane | None = None
        self._tasks: queue.Queue[_Task | None] = queue.Queue()
        self._pods = SeenPods()  # the pod informer's, by namespace/name and by job
        self._pod_watch: Informer[SitePod] | None = None
        self._waiting: dict[str, str] = {}  # namespace/name -> the unbound pod's reason noted
        self._informers: list[Informer[Any]] = []
        self._node_informer: Informer[SiteNode] | None = None
        self._worker: threading.Thread | None = None
        self._client: Client | None = None
        self._secret_value: bytes | None = None  # the kubeconfig_secret's value in use
        self._closed = threading.Event()
        # the held jobs reconciled with the cluster (a restart's first): pods' logs followed
        self._adopted = threading.Event()
        self._failures = self._settling = 0  # the worker's tasks failed in a row (_settle)
        # the plane's runs' pods, many runs' at once (creations.py)
        self.runs = RunPods(
            config,
            lambda: self._client,
            lambda: self._plane,
            self.owns,
            self._send,
            self._pods.of_job,
            self._delete_pod,
        )
        # kubectl users' pods under the plane's queues
        self._gated = GatedPods(config, self._tasks.put, self._send, self._send_all)
        # pods bound to its nodes: those of no job of the plane's counted as use, the cards its
        # jobs' pods were bound to followed (foreign.py)
        self.foreign_pods = ForeignPods(config, self.owns, self._gated.job_of_uid)
        self.services = SiteServices(config, self._vendors)
        # the log streams hold their connections open: a client of their own, so that they never
        # take the connections the worker's requests need
        self._log_client: Client | None = None
        self.logs = PodLogs(config.name, lambda: self._log_client, self._log_sink, self._log_done)
        self.finished = FinishedJobs(
            config,
            lambda: self._client,
            lambda: self._plane,
            self._watched_pods,
            RawPod,
            RawSecret,
        )
        # the cards' power samples, read from the node agents (node_power.py); None: modelled
        metrics = config.node_metrics
        self.node_power = None if metrics is None else NodePower(config.name, metrics, self.owns)

    # ------------------------------------------------------------------ the Site protocol
    @property
    def name(self) -> str:
        return self.config.name

    @property
    def kind(self) -> str:
        return KIND

    def owns(self, record: NodeRecord) -> bool:
        return record.source == self.source

    def hosted(self, records: Iterable[NodeRecord]) -> Iterator[HostedNode]:
        """A cordoned node (``spec.unschedulable``, or the admin's cordon) or a lost one takes no
        new work; HAMi's cordoned cards and the admin's neither. Each node is in the link domain
        its ``link_domain_label`` names (``engine/link_domains.py``)."""
        label = self.config.link_domain_label
        for rec in records:
            yield HostedNode(
                labelled(rec.node, label),
                not (rec.cordoned or rec.status is NodeStatus.LOST),
                frozenset(rec.cordoned_devices | rec.node.cordoned_devices),
            )

    def start(self, job: HeldJob) -> bool:
        """Queue the creation of the job's pods, as its next attempt; they may run from now on."""
        self._tasks.put(Start(job.id, job.attempt + 1))
        return True

    def stop(self, job: HeldJob) -> None:
        """Queue the deletion of the job's pods; its cards stay held until they are gone."""
        self._tasks.put(_Stop(job.id))

    def adopt(self, jobs: Iterable[HeldJob]) -> None:
        """Queue the reconciliation of ``jobs`` with the cluster's pods (the worker lists them
        once the site is attached)."""
        self._tasks.put(_Adopt(tuple(j.id for j in jobs)))

    @property
    def gated(self) -> GatedPods:
        """Its kubectl users' pods under the plane's queues (``gated.py``)."""
        return self._gated

    def foreign(self) -> Mapping[str, Sequence[Allocation]]:
        """What pods on its nodes that are no job of the plane's hold (``foreign.py``)."""
        return self.foreign_pods.foreign()

    def answering(self) -> Collection[str] | None:
        """The Nodes its API server lists now, while it answers any of the site's watches;
        None before the site is attached, and while none of them has had an answer since it
        last failed (``server/sites/protocol.WatchedSite``)."""
        nodes, informers = self._node_informer, self._informers
        if nodes is None or all(i.silent_since is not None for i in informers):
            return None
        return nodes.keys()

    def secret_changed(self, name: str) -> None:
        """The admin set its secret ``name``: if it is this site's kubeconfig, the worker reads
        it and switches to it (``server/sites/protocol.SecretReader``)."""
        if name == self.config.kubeconfig_secret and self._plane is not None:
            self._tasks.put(_Rotate())

    # ------------------------------------------------------------------ services (service_sites)
    def want_services(self, wants: Mapping[ServiceKey, ServiceWant]) -> None:
        self.services.want(wants)

    def ready(self, tenant: str, service: str) -> Sequence[Endpoint]:
        return self.services.ready(tenant, service)

    def problem(self, tenant: str, service: str) -> str:
        return self.services.problem(tenant, service)

    def _vendors(self) -> set[str]:
        plane = self._plane
        if plane is None:
            return set()
        return plane.read(
            lambda: {
                d.vendor
                for r in plane.node_records.values()
                if self.owns(r)
                for d in r.node.devices
            }
        )

    # ------------------------------------------------------------------ lifecycle
    def attach(self, plane: ControlPlane) -> None:
        """Start watching the cluster and acting on it for ``plane`` (``xpupool up`` calls it
        once the plane has read its books)."""
        credentials = read_credentials(self.config, plane)  # before anything starts
        self._plane, self._secret_value = plane, credentials.secret_value
        config = credentials.config
        self._client = make_client(config)
        self._log_client = make_client(config)
        nodes: Informer[SiteNode] = Informer(
            config,
            RawNode,
            lambda obj: read_node(obj, self.name),
            self._on_node,
            resync_s=self.resync_s,
            name=f"site-{self.name}-nodes",
        )
        pods = self._pod_informer(config)
        self.foreign_pods.bind(plane)
        bound: Informer[dict[str, Any]] = Informer(
            config,
            RawPod,
            lambda obj: obj,
            self.foreign_pods.on_pod,
            listed=self.foreign_pods.on_pods,
            fields={
                "spec.nodeName": operators.not_equal(""),
                "status.phase": operators.not_in(list(TERMINAL)),
            },
            # the pods with the site's label are the pod watch's (labelled_pods.py)
            labels=without_label(self.name),
            resync_s=self.resync_s,
            name=f"site-{self.name}-bound",
        )
        self._node_informer = nodes
        self._informers = [nodes.start(), pods.start(), bound.start()]
        self._informers.append(self._gated.attach(plane, self._client, config))
        agents = None if self.node_power is None else self.node_power.watch(config, self.resync_s)
        if agents is not None:  # the node agents' Service's slices (agent_endpoints.py)
            self._informers.append(agents.start())
        self.services.start(config, self._client, self.resync_s)
        self._tasks.put(_Sweep(None))  # what ended while no plane watched
        self._worker = threading.Thread(target=self._work, name=f"site-{self.name}", daemon=True)
        self._worker.start()
        if self.node_power is not None:
            self.node_power.start(plane)

    def _pod_informer(self, config: SingleConfig) -> Informer[SitePod]:
        """The watch of the pods with this site's label (not started): the plane's own pods, and
        any other pod that wears the label, whose use it counts (``labelled_pods.py``). A list's
        pods are taken together (:meth:`_on_site_pods`), and so are a watch's that queued up
        behind one another (``coalesce``: a burst of jobs' pods going Pending, bound, Running
        was a write per event under the plane's lock). A restart's reconciliation reads its
        first list."""
        self._pod_watch = Informer(
            config,
            RawPod,
            site_pod,
            lambda event: self._on_site_pods([event]),
            labels=with_label(self.name),
            resync_s=self.resync_s,
            name=f"site-{self.name}-pods",
            listed=self._on_site_pods,
            coalesce=True,
        )
        return self._pod_watch

    def wait_synced(self, timeout_s: float | None = None) -> bool:
        synced = all(i.wait_synced(timeout_s) for i in self._informers)
        return synced and self.services.wait_synced(timeout_s)

    def detach(self) -> None:
        """Stop the informers and the worker (what is queued is dropped: the next plane adopts)."""
        self._closed.set()
        self._tasks.put(None)
        if self.node_power is not None:
            self.node_power.stop()
        for informer in self._informers:
            informer.stop()
        self.services.stop()
        self.logs.close()
        if self._worker is not None:
            self._worker.join(10)
        self.runs.close()
        for client in (self._client, self._log_client):
            if client is not None:
                client.close()

    # ------------------------------------------------------------------ nodes
    def _on_node(self, event: Event[SiteNode]) -> None:
        plane = self._plane
        node = event.value.node
        if plane is None or node is None:
            return
        if event.type is EventType.DELETED:
            self._node_gone(plane, node.name)
            return
        rec = plane.node(node.name)
        if rec is not None and self.owns(rec) and rec.status is NodeStatus.LOST:
            site_runs.node_back(plane, node.name)  # back in the cluster: ready again
        if rec is None:
            fleet.register_many(plane, [node], source=self.source)
            log.info("site %s: node %s registered", self.name, node.name)
            return
        if not self.owns(rec):
            log.warning(
                "site %s: node %s refused: the plane has a node of that name from %s",
                self.name,
                node.name,
                rec.source,
            )
            return
        if _inventory(rec.node) != _inventory(node):
            self._node_changed(plane, node)
        if rec.cordoned == node.schedulable:
            fleet.cordon_node(plane, node.name, not node.schedulable)

    def _node_changed(self, plane: ControlPlane, node: Node) -> None:
        """A Node of this site whose cards, capacity, labels or taints changed: registered again
        as an agent's new inventory is, draining (what live work holds of the old one stays
        served, cordoned, until that work ends: ``server/drain.py``); one the plane cannot serve
        (a card UUID another node has, an engine that would not take the held work) is left as
        it was, and logged."""
        schedulable = replace(node, schedulable=True)  # the cordon follows, as for a new node
        try:
            plane.register(schedulable, source=self.source, drain=True, declared_taints=True)
        except (RequestError, Conflict) as exc:
            log.warning("site %s: node %s kept as it was: %s", self.name, node.name, exc)
            return
        log.info("site %s: node %s changed", self.name, node.name)

    def _node_gone(self, plane: ControlPlane, name: str) -> None:
        """A Node deleted from the cluster: lost in the plane's book (nothing new goes there),
        and its jobs dealt with as a lost node's (requeued by default); their pods there, if
        any are left, belong to no run of the plane any more and are deleted."""
        rec = plane.node(name)
        if rec is None or not self.owns(rec):
            return
        site_runs.node_deleted(plane, name, rec, f"node {name} deleted from site {self.name}")

    # ------------------------------------------------------------------ pods
    def _on_site_pods(self, events: Sequence[Event[SitePod]]) -> None:
        """The pod watch's list, or a batch of its events: the plane's own pods' states to
        :meth:`_on_pods`, and every pod's use to ``foreign.py``, with their jobs' runs read once
        for both. A pod whose labels stopped being the plane's is gone from its own pods."""
        own: list[Event[PodState]] = []
        for event in events:
            value = event.value
            if value.state is not None:
                own.append(Event(event.type, event.key, event.uid, value.state))
                continue
            if event.type is not EventType.DELETED and value.unreadable:
                log.warning(
                    "site %s: pod %s has the site's label but is no pod of the plane's: %s",
                    self.name,
                    event.key,
                    value.unreadable,
                )
            before = self._pods.get(event.key)
            if before is not None:
                own.append(Event(EventType.DELETED, event.key, event.uid, before))
        plane = self._plane
        # the runs of their jobs as one read of the plane, not three a pod (a lock each)
        runs = {} if plane is None else plane.held_runs({e.value.job for e in own})
        self._on_pods(own, runs)
        self.foreign_pods.on_site_pods(events, runs)

    def _on_pods(
        self, events: Sequence[Event[PodState]], runs: Mapping[int, RunView] | None = None
    ) -> None:
        """A list's pods (the first after a restart: every pod of the held jobs), or a batch of
        the watch's events, each taken as :meth:`_on_pod` takes it, their reports and waiting
        notes applied together, a write per :data:`REPORT_CHUNK` (one each was a write each:
        10,000 of them after a restart, 300 a second in a burst of 100 jobs a second). ``runs``:
        their jobs' runs as read at the batch's start (None: read here)."""
        plane = self._plane
        reports: list[SiteReport] = []
        if runs is None:  # the runs of their jobs as one read of the plane, not three a pod
            runs = {} if plane is None else plane.held_runs({e.value.job for e in events})
        for event in events:
            try:
                self._on_pod(event, reports, runs)
            except Exception:  # one pod is not worth the others' reports
                log.exception("site %s: pod %s %s", self.name, event.key, event.type)
        try:
            self._send_all(reports)
        except XpupoolError as exc:
            log.warning("site %s: %d reports of pods refused: %s", self.name, len(reports), exc)
        for job_id in sorted({e.value.job for e in events if _ended(e)}):
            self._sweep_if_over(job_id)  # asked once their reports are applied: they end jobs

    def _on_pod(
        self,
        event: Event[PodState],
        reports: list[SiteReport] | None = None,
        runs: Mapping[int, RunView] | None = None,
    ) -> None:
        """One pod's change; its report (and note) sent at once, or added to ``reports`` (a
        batch's, whose jobs' runs ``runs`` holds as read at its start: absent, not held)."""
        state = event.value
        plane = self._plane
        if runs is not None:
            run = runs.get(state.job)
        else:
            run = None if plane is None else plane.held_run(state.job)
        if event.type is EventType.DELETED:
            self._pods.pop(event.key)
            self._waiting.pop(event.key, None)
        else:
            self._pods.put(event.key, state)
            if self._stray(state, run):
                namespace, _, name = event.key.partition("/")
                self._tasks.put(_DeletePod(namespace, name))
                return
            if state.waiting and self._waiting.get(event.key) != state.waiting:
                self._waiting[event.key] = state.waiting
                self._note_waiting(state, reports)
        said = self._report_of(state, run, gone=event.type is EventType.DELETED)
        if said is not None and reports is not None:
            reports.append(said)
        elif said is not None:
            self._send(*said)
            run = None if plane is None else plane.held_run(state.job)  # as the report left it
        if event.type is not EventType.DELETED and state.phase in ("Running", *TERMINAL):
            self._follow_log(event.key, state, run)
        if reports is None and _ended(event):
            self._sweep_if_over(state.job)

    def _sweep_if_over(self, job_id: int) -> None:
        """A pod of ``job_id`` ended, its report applied (it may be what ended the job): when
        the plane holds the job no more, its run is over and the worker looks at whether the
        job is finished (its Secret, its pods' retention)."""
        plane = self._plane
        if plane is not None and plane.held_run(job_id) is None:
            self._tasks.put(_Sweep(job_id))

    # ------------------------------------------------------------------ logs (pod_logs.py)
    def _follow_log(self, key: str, state: PodState, run: RunView | None) -> None:
        """Follow the pod's log into its replica's, when ``run`` (its job's, as read last) is
        the pod's run. Not before the held jobs are reconciled with the cluster: a restart's
        first list would start a follower for each running pod (:data:`MAX_FOLLOWED`), each a
        thread and a request while that list is read; :meth:`_adopt` follows them after."""
        if self._plane is None or run is None or run.attempt != state.attempt:
            return
        if not self._adopted.is_set():
            return
        found = run.node_of(state.replica)
        if found is not None and not self.logs.follows(key):
            self.logs.follow(key, LogTarget(state.job, state.replica, state.attempt, found))

    def _log_sink(self, target: LogTarget, chunk: bytes, offset: int) -> bool:
        plane = self._plane
        if plane is None:
            return False
        try:
            agents.append_log(
                plane,
                target.node,
                target.job,
                target.replica,
                chunk,
                offset=offset,
                attempt=target.attempt,
            )
        except NotFound:
            return False  # the job was released: nothing more of it is kept
        return True

    def _log_done(self, key: str) -> bool:
        state = self._pods.get(key)
        return state is None or state.phase in TERMINAL

    def _stray(self, state: PodState, run: RunView | None) -> bool:
        """A pod still running (or waiting) that no run of the plane owns any more (``run``,
        its job's as read last, None: not held): of a job released or of an earlier attempt
        (its node deleted, say). It would hold cards the plane counts as free."""
        if self._plane is None or state.phase in TERMINAL:
            return False
        return run is None or state.attempt < run.attempt

    def _note_waiting(self, state: PodState, reports: list[SiteReport] | None) -> None:
        """The plane admitted the job, the cluster has not bound its pod (the extender found no
        node: another scheduler's pod took the cards in between, say): the job waits with
        kube-scheduler's and the extender's reason, as one event each time it changes; noted at
        once, or added to ``reports`` (a list's)."""
        if self._plane is None:
            return
        note = waiting_note(state, self.name)
        if reports is not None:
            reports.append(note)
        else:
            self._send_all([note])

    def _report_of(
        self, state: PodState, run: RunView | None, *, gone: bool
    ) -> tuple[str, ReplicaReport] | None:
        """(node, report) of the pod's state for the plane, given ``run`` (its job's as read
        last, None: not held), or None: nothing new to say."""
        if self._plane is None:
            return None
        if run is None or (run.attempt and state.attempt != run.attempt):
            return None  # a pod of a released job, or of another run: the worker deletes it
        if state.replica in run.final:
            return None
        running = state.phase == "Running" and not (gone or state.deleting or state.reason)
        if running and state.replica in run.running:
            return None  # the plane has it running: nothing new (a pod's every update, a
            # restart's list and its reconciliation each say so again; a write of the plane's each;
            # asked before the report is made: 10,000 of them after a restart)
        node, stopping = run.node_of(state.replica), run.stopping
        if node is None:
            return None
        r = pod_report(state, gone=gone, stopping=stopping)
        return None if r is None else (node, r)

    def _send_all(self, reports: Sequence[SiteReport]) -> None:
        """Many pods' reports, ``(node, report)``, and notes, a write per :data:`REPORT_CHUNK`;
        a chunk the plane refuses is applied again one report at a time, so that one report
        refused (as a heartbeat's would be) costs only itself."""
        plane = self._plane
        assert plane is not None
        for i in range(0, len(reports), REPORT_CHUNK):
            chunk = reports[i : i + REPORT_CHUNK]
            try:
                agents.site_reports(plane, chunk)
            except XpupoolError as exc:
                if len(chunk) == 1:
                    raise
                log.warning("site %s: %d reports refused together: %s", self.name, len(chunk), exc)
                for one in chunk:
                    try:
                        agents.site_reports(plane, [one])
                    except XpupoolError as why:
                        log.warning("site %s: a report refused: %s", self.name, why)

    def _send(self, node: str, r: ReplicaReport) -> None:
        assert self._plane is not None
        try:
            agents.heartbeat(self._plane, Heartbeat(node=node, replicas=[r]))
        except XpupoolError as exc:
            log.warning("site %s: report of job %d refused: %s", self.name, r.job_id, exc)

    # ------------------------------------------------------------------ the worker
    def _work(self) -> None:
        self._failures = self._settling = 0
        sweep_at = time.monotonic() + self.resync_s if self.resync_s > 0 else None
        carried: list[_Task | None] = []  # the task that ended a batch: done next
        while not self._closed.is_set():
            # what is due goes first, so that a busy queue never holds a deletion back
            now, due = time.monotonic(), self.finished.next_due()
            task: _Task | None
            if sweep_at is not None and now >= sweep_at:
                sweep_at, task = now + self.resync_s, _Sweep(None)
            elif due is not None and now >= due:
                task = _Due()
            elif carried:
                task = carried.pop()
            else:
                wake = [t for t in (due, sweep_at) if t is not None]
                try:
                    task = self._tasks.get(timeout=max(0.0, min(wake) - now) if wake else None)
                except queue.Empty:
                    continue
            if task is None:
                return
            if isinstance(task, Start) and not self._gated.owns(task.job):
                starts, more = take_batch(task, self._tasks, self._joins, MAX_BATCH)
                carried.extend(more)
                self._settle(self.runs.start_all(starts))
                continue
            try:
                self._do(task)
            except Exception as exc:  # the API server's answer, or none: _settle says which
                self._settle([(task, exc)])
            else:
                self._settle([])

    def _joins(self, task: _Task | None, batch: Sequence[Start]) -> Start | None:
        """``task`` as a member of a batch of the plane's starts, or None: not such a start, or
        of a job the batch starts already (made after it, in order)."""
        if not isinstance(task, Start) or self._gated.owns(task.job):
            return None
        return None if any(s.job == task.job for s in batch) else task

    def _settle(self, failed: Sequence[tuple[_Task, Exception]]) -> None:
        """What the worker's tasks (one, or a batch of starts) that failed raised: a refusal of
        the API server's (a 4xx, not a 409) fails the task's job with its answer, anything else
        (no answer, a 5xx, a refusal that passes) is tried again after the backoff, all the
        batch's at once. A 403 or 429 while the server settles counts once per batch."""
        if not failed:
            self._failures = self._settling = 0
            return
        answers = [exc for _, exc in failed if isinstance(exc, ApiError)]
        if answers:  # a refusal that passes: not yet the server's word (connection errors, which
            # come before it while the server is away, are counted apart)
            passing = any(exc.status.code in api_errors.SETTLING for exc in answers)
            self._settling = self._settling + 1 if passing else 0
        retry: list[tuple[_Task, Exception]] = []
        for task, exc in failed:
            if isinstance(exc, ApiError) and api_errors.refused(exc, self._settling):
                log.warning("site %s: %s refused: %s", self.name, task, exc)
                self._refused(task, str(exc))
            else:
                retry.append((task, exc))
        if not retry:
            self._failures = self._settling = 0
            return
        self._failures += 1
        self._retry(retry)

    def _retry(self, failed: Sequence[tuple[_Task, Exception]]) -> None:
        delay = backoff_s(self._failures)
        task, exc = failed[0]
        more = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
        log.warning("site %s: %s%s: %s; again in %.1f s", self.name, task, more, exc, delay)
        if not self._closed.wait(delay):
            for task, _ in failed:
                self._tasks.put(task)

    def _do(self, task: _Task) -> None:
        if isinstance(task, GatedTask):
            self._gated.do(task)
        elif isinstance(task, Start):  # a kubectl user's pod (the plane's own: runs.start_all)
            self._gated.do(self._gated.start(task.job, task.attempt))
        elif isinstance(task, _Stop) and self._gated.owns(task.job):
            self._gated.do(self._gated.stop(task.job))
        elif isinstance(task, _Stop):
            self._delete(task.job)
        elif isinstance(task, _Sweep):
            self.finished.sweep(task.job)
        elif isinstance(task, _Due):
            self.finished.delete_due()
        elif isinstance(task, _Rotate):
            self._rotate()
        elif isinstance(task, _DeletePod):
            client = self._client
            assert client is not None
            self._delete_pod(client, task.namespace, task.name)
        else:
            self._adopt(task.jobs)

    def _delete_pod(self, client: Client, namespace: str, name: str) -> None:
        """A pod of no run of the plane's: deleted at once (no kubelet may be left to wait for)."""
        log.info("site %s: pod %s/%s of no run deleted", self.name, namespace, name)
        with gone_ok():
            client.delete(RawPod, name, namespace=namespace, grace_period=0)

    def _rotate(self) -> None:
        """Switch to the credentials the site's secret holds now, on the worker's thread (no
        request of its own is in flight): new clients for the worker and the log streams, the
        informers and the services reconfigured in place, the old clients closed. A secret
        deleted or not a kubeconfig leaves the site as it was, logged."""
        plane = self._plane
        assert plane is not None
        try:
            credentials = read_credentials(self.config, plane)
        except RequestError as exc:
            log.warning("site %s: credentials kept as they were: %s", self.name, exc)
            return
        if credentials.secret_value == self._secret_value:
            return
        config, old = credentials.config, (self._client, self._log_client)
        self._secret_value = credentials.secret_value
        self._client, self._log_client = make_client(config), make_client(config)
        self._gated.use_client(self._client)
        self.services.rebind(config, self._client)
        for informer in self._informers:
            informer.reconfigure(config)
        for client in old:
            if client is not None:
                client.close()
        log.info(
            "site %s: credentials of secret %s rotated: watching and acting with them",
            self.name,
            self.config.kubeconfig_secret,
        )

    def _refused(self, task: _Task, why: str) -> None:
        """The API server refused the site's request (not a 409): the job fails with its
        answer, as an agent's replica that could not start."""
        if isinstance(task, GatedTask) and task.kind == "admit":
            task = Start(task.job, task.attempt)
        if not isinstance(task, Start):
            return
        plane = self._plane
        assert plane is not None
        run = plane.held_run(task.job)
        for replica, node in () if run is None else run.allocations:
            r = ReplicaReport(
                job_id=task.job,
                replica=replica,
                state=ReplicaState.FAILED,
                attempt=task.attempt,
                reason=f"site {self.name}: {why[:500]}",
            )
            self._send(node, r)

    def _job_pods(self, job_id: int) -> list[tuple[str, str]]:
        """(namespace, name) of the job's pods: as the pod watch holds them when it holds a pod
        of the current run for each of the run's replicas, else listed by label. The watch's
        copy is then as fresh as a list for a stop: only the plane makes pods labelled with its
        jobs, one per replica and run, so a pod of the run that the watch has not shown yet
        (made a moment ago) is the only thing a list would add, and that is the case where the
        list is still made; a pod of an earlier run not seen yet is a stray, deleted when the
        watch shows it (:meth:`_stray`). A list per stop read the API server for what the
        watch held already."""
        seen = self._pods.of_job(job_id)
        plane = self._plane
        run = None if plane is None else plane.held_run(job_id)
        if run is not None and run.allocations:
            current = {s.replica for _, s in seen if s.attempt == run.attempt}
            if all(r in current for r, _ in run.allocations):
                return [(k.partition("/")[0], k.partition("/")[2]) for k, _ in seen]
        client = self._client
        assert client is not None
        labels: dict[str, Any] = {JOB: str(job_id), SITE: self.name}
        listed = [dict(p)["metadata"] for p in client.list(RawPod, namespace="*", labels=labels)]
        return [(str(m["namespace"]), str(m["name"])) for m in listed]

    def _delete(self, job_id: int) -> None:
        """Delete the job's pods (their own grace period) and its Secret (listed in the pods'
        namespaces and the tenant's: the plane may not list Secrets cluster-wide); with no pod
        there, its replicas are reported stopped at once (it was stopped before its pods were
        made)."""
        client = self._client
        assert client is not None
        pods = self._job_pods(job_id)
        for namespace, name in pods:
            with gone_ok():
                client.delete(RawPod, name, namespace=namespace)
        namespaces = {namespace for namespace, _ in pods}
        plane = self._plane
        run = None if plane is None else plane.held_run(job_id)
        if run is not None:
            with contextlib.suppress(RequestError):  # no namespace name: no Secret there either
                namespaces.add(self.config.namespace(run.tenant))
        self.finished.delete_secrets(job_id, namespaces)
        if not pods:
            self._stopped_without_pods(job_id)

    def _stopped_without_pods(self, job_id: int) -> None:
        plane = self._plane
        assert plane is not None
        run = plane.held_run(job_id)
        if run is None:
            return
        attempt = run.attempt or None
        for node, replica in run.unfinished():
            r = ReplicaReport(
                job_id=job_id, replica=replica, state=ReplicaState.STOPPED, attempt=attempt
            )
            self._send(node, r)

    def _wait_listed(self) -> None:
        """Wait up to :data:`LISTED_WAIT_S` for the pod watch's first list; raise
        :class:`NotListedError` if it has not come (the task is done again after the backoff)."""
        watch = self._pod_watch
        if watch is None or not watch.wait_synced(LISTED_WAIT_S):
            raise NotListedError(f"site {self.name}: its pods' watch has not listed them yet")

    def _watched_pods(self, job: int | None) -> dict[int, set[str]]:
        """The namespaces of the plane's pods by job (of ``job`` only, unless None) as the pod
        watch holds them, waiting for its first list: :class:`NotListedError` until it has
        listed them. The watch and the finished jobs' sweep select the same pods (the plane's
        job label and this site's), so the sweep reads the watch's copy, not a list of every pod
        of the site (which queued a restart's reconciliation behind a second read of them)."""
        self._wait_listed()
        if job is None:
            return self._pods.namespaces_by_job()
        return {job: {key.partition("/")[0] for key, _ in self._pods.of_job(job)}}

    def _adopt(self, jobs: Sequence[int]) -> None:
        """A restarted plane's held ``jobs`` reconciled with the cluster's pods: a kubectl user's
        admitted again; the plane's own matched to their pods as the pod watch's first list
        told them (a list of its own read every pod of the site a second time; before that, a
        list per job read them N times for N jobs). Until the watch has listed them,
        :class:`NotListedError`: done again after the worker's backoff."""
        plane = self._plane
        assert plane is not None
        own = {job for job in jobs if not self._gated.owns(job)}
        if own:
            self._wait_listed()
        reports: list[SiteReport] = []  # what the pods say, sent together
        runs = plane.held_runs(jobs)  # one read of the plane, not one a job and pod
        for job_id in jobs:
            run = runs.get(job_id)
            if job_id not in own:  # a kubectl user's pod: admitted again, its gate removed
                attempt = -1 if run is None or run.stopping else run.attempt
                if attempt >= 0:
                    self._gated.do(self._gated.reconcile(job_id, attempt))
                continue
            self._reconcile(job_id, run, self._pods.of_job(job_id), reports)
        self._send_all(reports)  # a write per chunk, not per pod
        # the end of a restart's reconciliation (bench/k8s_plane.py times it from this)
        log.info("site %s: %d held jobs reconciled with the cluster", self.name, len(jobs))
        if not self._adopted.is_set():
            self._adopted.set()  # first: a pod's event from now on starts its own follower
            self._follow_logs()

    def _follow_logs(self) -> None:
        """Follow the logs of the pods the watch holds that run or have finished (after the held
        jobs' reconciliation; see :meth:`_follow_log`)."""
        plane = self._plane
        assert plane is not None
        pods = [(k, s) for k, s in self._pods.items() if s.phase in ("Running", *TERMINAL)]
        runs = plane.held_runs({s.job for _, s in pods})
        for key, state in pods:
            self._follow_log(key, state, runs.get(state.job))

    def _reconcile(
        self,
        job_id: int,
        run: RunView | None,
        pods: Sequence[tuple[str, PodState]],
        reports: list[SiteReport],
    ) -> None:
        """One held job after a restart, its ``run`` as read (None: held no more), with its
        ``pods`` (``(namespace/name, state)``): those of other runs deleted; its current run's
        pods reported (a missing one of a running job is lost: added to ``reports``), or made
        when never made (queued: the worker makes them in its next batch)."""
        client = self._client
        assert client is not None
        stale = [(key, s) for key, s in pods if run is None or s.attempt != run.attempt]
        for key, _ in stale:
            namespace, _, name = key.partition("/")
            log.info("site %s: pod %s of an earlier run deleted", self.name, name)
            with gone_ok():
                client.delete(RawPod, name, namespace=namespace)
        if run is None:
            return
        attempt = run.attempt
        current = [s for _, s in pods if s.attempt == attempt]
        if run.stopping:
            self._delete(job_id)
            return
        if attempt == 0 or (not current and run.state is not JobPhase.RUNNING):
            # counted but never made, or never counted
            self._tasks.put(Start(job_id, max(attempt, 1)))
            return
        seen = {s.replica for s in current}
        reports.extend(x for s in current if (x := self._report_of(s, run, gone=False)) is not None)
        missing = [(node, r) for r, node in run.allocations if r not in seen]
        for node, replica in missing:
            why = f"pod {pod_name(job_id, replica, attempt)} is missing on site {self.name}"
            r = ReplicaReport(
                job_id=job_id,
                replica=replica,
                state=ReplicaState.FAILED,
                attempt=attempt,
                reason=why,
            )
            reports.append((node, r))


def _ended(event: Event[PodState]) -> bool:
    """Does the event say the pod has ended (not gone: a deletion ends nothing)?"""
    return event.type is not EventType.DELETED and event.value.phase in TERMINAL


def _inventory(node: Node) -> Node:
    """What a Node's change re-registers: all but its cordon (``spec.unschedulable``, which
    cordons and uncordons the node on its own)."""
    return replace(node, schedulable=True)
