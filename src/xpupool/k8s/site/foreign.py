"""Pods on a site's nodes that are no job of the plane's, counted as use (issue 49, "foreign
use"; docs/kubernetes.md, "Pods the plane did not create").

Another scheduler's pods, HAMi users' pods outside the plane's queues and system pods hold cards
the plane would otherwise count as free. The site watches the pods bound to nodes (finished ones
left out by the API server) and reads which cards each holds with the extender's reader
(``informers/cluster_view.read_pod`` over ``informers/decoders.decode_pod_devices``: HAMi's
``allocated`` annotations, which xpupool's bind writes too, init containers charged as HAMi
charges them; ``pod_allocations`` makes the engine's allocations), so the plane's books and the
extender's count a pod alike. What is counted:

- the plane's own pod of a run it holds (its labels, and the name and namespace the plane gives
  that replica's pod), or a kubectl user's pod the plane has a job for, is left out: its job's
  allocation counts it (a pod labelled as the plane's but of no run it holds is counted);
- a pod whose cards are announced by no annotation (a whole-card ``nvidia.com/gpu`` limit that
  the device plugin filled, HAMi or xpupool never asked) counts nothing: no annotation says which
  cards it holds, and the extender counts nothing for it either, so the two agree;
- a pod on a node of another site, or of no site, counts nothing here, nor one whose annotation
  names a card its node does not have (logged: the annotations are anyone's to write);
- only cards: the decoder charges no host CPU or memory.

The same watch follows the cards the plane's jobs' pods were bound to: a kubectl user's pod,
which the extender places on its own, may get other cards than the plane's placement; the job's
allocation is then re-addressed to them (``server/plane/bound_cards.py``).

Each change goes to the plane's engine (``server/plane/foreign_use.py``) as the charge of holder
``pod NAMESPACE/NAME``, nobody's job and in no tenant's quota; the site's book here is what the
plane re-applies when it rebuilds its engine (:meth:`ForeignPods.foreign`).

Each change is metered too (``server/usage/meter.py``), so a site's card-hours add up: the cards
a pod holds, from when the site saw it bound until it ends, under the tenant whose namespace it
is (the site's ``namespaces`` and ``namespace_prefix``, as for kubectl users' pods) or else
tenant :data:`FOREIGN`, and under queue NAMESPACE. A plane that was down saw nothing: the time
until its site reads the pods again is not counted.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from xpupool.k8s.informers.cluster_view import PodDevices, pod_allocations, read_pod
from xpupool.k8s.informers.decoders import decode_pod_devices
from xpupool.k8s.informers.watch import Event, EventType
from xpupool.k8s.site.gated import tenant_of_namespace
from xpupool.k8s.site.pods import JOB, SITE, label_job, pod_name, pod_state
from xpupool.k8s.site.sites_file import KubernetesSiteConfig
from xpupool.model.allocation import Allocation
from xpupool.model.errors import RequestError
from xpupool.server.plane import bound_cards, foreign_use

if TYPE_CHECKING:
    from xpupool.server.plane import ControlPlane, NodeRecord
    from xpupool.server.plane.records import RunView

__all__ = ["FOREIGN", "ForeignPods", "holder_of"]

FOREIGN = "foreign"
"""The tenant usage of a pod in no tenant's namespace is metered under."""

log = logging.getLogger(__name__)

# what a charge holds, ids and slots aside: (node, sorted (card, MiB, permille) shares)
_Held = tuple[str, tuple[tuple[str, int, int], ...]]


def holder_of(key: str) -> str:
    """The holder's name of the pod whose informer key is ``key`` (``namespace/name``)."""
    return f"pod {key}"


class ForeignPods:
    """The foreign use of one site: what each pod bound to its nodes that is no job of the
    plane's holds. The informer's thread feeds :meth:`on_pod`; the plane reads :meth:`foreign`
    under its lock when it builds its engine."""

    def __init__(
        self,
        config: KubernetesSiteConfig,
        owns: Callable[[NodeRecord], bool],
        gated_job: Callable[[str], tuple[int, int] | None],
    ) -> None:
        self.config = config
        self.site = config.name
        self._owns = owns  # is a node record this site's?
        self._gated_job = gated_job  # (job, replica) a kubectl user's pod of this uid stands for
        self._plane: ControlPlane | None = None
        self._book: dict[str, tuple[_Held, tuple[Allocation, ...]]] = {}  # holder -> use

    def bind(self, plane: ControlPlane) -> None:
        """Serve ``plane`` (the site's ``attach``; a test without a cluster calls it alone and
        drives :meth:`on_pod` itself)."""
        self._plane = plane

    def foreign(self) -> dict[str, tuple[Allocation, ...]]:
        """Holder -> the allocations it holds (the site protocol's ``foreign``)."""
        return {holder: allocs for holder, (_, allocs) in self._book.items()}

    def on_pods(self, events: Sequence[Event[dict[str, Any]]]) -> None:
        """The informer's list (every bound pod of the site after a restart, 10,000 of them):
        each taken as :meth:`on_pod` takes it, the runs of the jobs whose pods they say they are
        read in one read of the plane, not a take of its lock each."""
        plane = self._plane
        if plane is None:
            return
        jobs = {job for e in events if (job := self._labelled_job(e.value)) is not None}
        runs = plane.held_runs(jobs)
        for event in events:
            try:
                self.on_pod(event, runs)
            except Exception:  # one pod is not worth the others' use
                log.exception("site %s: bound pod %s %s", self.site, event.key, event.type)

    def on_pod(
        self, event: Event[dict[str, Any]], runs: Mapping[int, RunView] | None = None
    ) -> None:
        """The informer's consumer: a pod bound to a node, added, changed or gone (``runs``: a
        list's jobs' runs as read at its start, absent: not held; None: read here)."""
        plane = self._plane
        if plane is None:
            return
        holder = holder_of(event.key)
        # asked before the plane's lock: a kubectl user's submission takes that lock under its own
        replica = None if event.type is EventType.DELETED else self._replica(plane, event, runs)
        counted = event.type is not EventType.DELETED and replica is None

        def make(take_id: Callable[[], int]) -> tuple[Allocation, ...] | None:
            """Under the plane's lock: the book and the engine change together."""
            assert plane is not None
            what = self._use(plane, event) if counted else None
            before = self._book.get(holder)
            if what is None:
                if before is None:
                    return None
                del self._book[holder]
                plane.meter.foreign_ended((self.site, holder), plane.clock())
                log.info("site %s: %s holds nothing any more", self.site, holder)
                return ()
            key, devices, priority = what
            if before is not None and before[0] == key:
                return None  # the same cards: a status change
            allocs = pod_allocations(holder, devices, priority, take_id)
            self._book[holder] = (key, allocs)
            self._meter(plane, event.key, priority, key[0], allocs)
            log.info("site %s: %s holds cards on node %s", self.site, holder, key[0])
            return allocs

        if counted or holder in self._book:  # (only this thread changes the book)
            foreign_use.change(plane, self.site, holder, make)
        if replica is not None:
            self._rebind(plane, event, replica)

    def _meter(
        self,
        plane: ControlPlane,
        key: str,
        priority: int,
        node_name: str,
        allocations: tuple[Allocation, ...],
    ) -> None:
        """Meter the pod ``key`` (``namespace/name``) holding ``allocations`` from now on (under
        the plane's lock, with the book's change)."""
        record = plane.node(node_name)
        if record is None:
            return
        namespace = key.split("/", 1)[0]
        tenant = tenant_of_namespace(self.config, namespace) or FOREIGN
        who = (tenant, namespace, priority)
        holder = (self.site, holder_of(key))
        plane.meter.foreign_started(holder, who, record.node, allocations, plane.clock())

    def _labelled_job(self, obj: Mapping[str, Any]) -> int | None:
        """The job a pod's labels say it is a replica of, when they say it is this site's pod
        of the plane's (None otherwise, or when the pod says so wrongly)."""
        meta = obj.get("metadata")
        labels = meta.get("labels") if isinstance(meta, Mapping) else None
        if not isinstance(labels, Mapping) or JOB not in labels or labels.get(SITE) != self.site:
            return None
        try:
            return label_job(labels)
        except RequestError:
            return None

    def _replica(
        self,
        plane: ControlPlane,
        event: Event[dict[str, Any]],
        runs: Mapping[int, RunView] | None = None,
    ) -> tuple[int, int, int | None] | None:
        """(job, replica, attempt or None: the current) of a pod that is a replica of a run the
        plane holds: its own pod (valid labels, the name and namespace the plane gives that
        replica's pod) or a kubectl user's pod it has a job for; None for any other pod, which
        is counted as use (a pod labelled as the plane's but of no run it holds, a stray the
        site deletes, holds its cards until it is gone)."""
        obj = event.value
        meta = obj.get("metadata")
        labels = meta.get("labels") if isinstance(meta, Mapping) else None
        labels = labels if isinstance(labels, Mapping) else {}
        if JOB in labels and labels.get(SITE) == self.site:
            try:
                state = pod_state(obj)
                run = plane.held_run(state.job) if runs is None else runs.get(state.job)
                if run is None or run.attempt != state.attempt:
                    return None
                name = pod_name(state.job, state.replica, state.attempt)
                if event.key != f"{self.config.namespace(run.tenant)}/{name}":
                    return None
            except RequestError:
                return None
            return state.job, state.replica, state.attempt
        found = self._gated_job(event.uid)
        return None if found is None else (*found, None)

    def _rebind(
        self,
        plane: ControlPlane,
        event: Event[dict[str, Any]],
        replica: tuple[int, int, int | None],
    ) -> None:
        """A plane job's pod bound: when the cards it got are not those of the plane's placement
        (a kubectl user's pod, which the extender places on its own), the job's allocation
        follows them (``server/plane/bound_cards.py``). A pod whose cards take more than one
        task (init containers beside the app's) is left to its placement."""
        rec = read_pod(event.value, decode_pod_devices)
        devices = rec.devices
        if rec.node is None or devices is None:
            return
        parts = devices.charged()
        node = plane.node(devices.node)
        if len(parts) != 1 or node is None or not self._owns(node):
            return
        shares = [(s.uuid, s.memory_mib, s.core_permille) for s in parts[0]]
        job, index, attempt = replica
        where = holder_of(event.key)
        bound_cards.rebind(plane, job, index, devices.node, shares, where, attempt)

    def _use(
        self, plane: ControlPlane, event: Event[dict[str, Any]]
    ) -> tuple[_Held, PodDevices, int] | None:
        """(held key, PodDevices, priority) of the pod, or None when it counts nothing here (a
        pod of a plane job is left out by the caller: its job's allocation counts it)."""
        obj = event.value
        rec = read_pod(obj, decode_pod_devices)
        devices = rec.devices
        if devices is None or not devices.charged():
            return None
        node = plane.node(devices.node)
        if node is None or not self._owns(node):
            return None  # another site's node, or no node of the plane's
        cards = {d.uuid for d in node.node.devices}
        if any(s.uuid not in cards for c in devices.charged() for s in c):
            log.warning(
                "site %s: %s names cards node %s does not have: counted as none",
                self.site,
                holder_of(event.key),
                devices.node,
            )
            return None
        shares = sorted(
            (s.uuid, s.memory_mib, s.core_permille) for c in devices.charged() for s in c
        )
        return (devices.node, tuple(shares)), devices, rec.priority
