"""Pods on a site's nodes that are no job of the plane's, counted as use (issue 49, "foreign
use"; docs/kubernetes.md, "Pods the plane did not create").

Another scheduler's pods, HAMi users' pods outside the plane's queues and system pods hold cards
the plane would otherwise count as free. The site watches the pods bound to nodes (finished ones
left out by the API server) that do not wear its label, and its pod watch hands over those that do
(``labelled_pods.py``: the plane's own pods are listed once, not twice); it reads which cards each
holds with the extender's reader
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

from xpupool.k8s.informers.cluster_view import PodDevices, PodRecord, pod_allocations, read_pod
from xpupool.k8s.informers.decoders import decode_pod_devices
from xpupool.k8s.informers.watch import Event, EventType
from xpupool.k8s.site.gated import tenant_of_namespace
from xpupool.k8s.site.labelled_pods import SitePod
from xpupool.k8s.site.pods import PodState, pod_name
from xpupool.k8s.site.sites_file import KubernetesSiteConfig
from xpupool.model.allocation import Allocation
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
# the watch a pod's use came from (labelled_pods.py): the bound pods' one, or the pod watch
_BOUND, _LABELLED = "bound", "labelled"


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
        # holder -> (what it holds, its allocations, the watch that counted it)
        self._book: dict[str, tuple[_Held, tuple[Allocation, ...], str]] = {}

    def bind(self, plane: ControlPlane) -> None:
        """Serve ``plane`` (the site's ``attach``; a test without a cluster calls it alone and
        drives :meth:`on_pod` itself)."""
        self._plane = plane

    def foreign(self) -> dict[str, tuple[Allocation, ...]]:
        """Holder -> the allocations it holds (the site protocol's ``foreign``)."""
        return {holder: allocs for holder, (_, allocs, _) in self._book.items()}

    def on_pods(self, events: Sequence[Event[dict[str, Any]]]) -> None:
        """The bound pods' watch's list (every bound pod of the site without its label after a
        restart), each taken as :meth:`on_pod` takes it."""
        if self._plane is None:
            return
        seen: list[bound_cards.Bound | None] = []
        for event in events:
            try:
                seen.append(self._bound_pod(event))
            except Exception:  # one pod is not worth the others' use
                log.exception("site %s: bound pod %s %s", self.site, event.key, event.type)
        self._follow(seen)

    def on_pod(self, event: Event[dict[str, Any]]) -> None:
        """The bound pods' watch's consumer: a pod without the site's label bound to a node,
        added, changed or gone. A kubectl user's pod the plane has a job for is that job's
        (its cards followed); any other is counted as use."""
        if self._plane is not None:
            self._follow([self._bound_pod(event)])

    def _bound_pod(self, event: Event[dict[str, Any]]) -> bound_cards.Bound | None:
        if event.type is EventType.DELETED:
            return self._take(event.key, None, None, _BOUND)
        # asked before the plane's lock: a kubectl user's submission takes that lock under its own
        found = self._gated_job(event.uid)
        replica = None if found is None else (*found, None)
        return self._take(event.key, read_pod(event.value, decode_pod_devices), replica, _BOUND)

    def _follow(self, seen: Sequence[bound_cards.Bound | None]) -> None:
        """The plane's jobs' replicas among a batch's pods follow the cards they were bound to,
        the batch checked in one read of the plane (``server/plane/bound_cards.py``)."""
        plane = self._plane
        assert plane is not None
        bound_cards.rebind_many(plane, [b for b in seen if b is not None])

    def on_site_pods(self, events: Sequence[Event[SitePod]], runs: Mapping[int, RunView]) -> None:
        """The pods with the site's label as the site's pod watch hands them over
        (``labelled_pods.py``; ``runs``: their jobs' runs as read at the batch's start, absent:
        not held): the plane's own pod of a run it holds is its job's (its cards followed);
        any other bound one is counted as use, as :meth:`on_pod` counts a pod without the
        label."""
        if self._plane is None:
            return
        seen: list[bound_cards.Bound | None] = []
        for event in events:
            try:
                seen.append(self._site_pod(event, runs))
            except Exception:  # one pod is not worth the others' use
                log.exception("site %s: pod %s %s", self.site, event.key, event.type)
        self._follow(seen)

    def _site_pod(
        self, event: Event[SitePod], runs: Mapping[int, RunView]
    ) -> bound_cards.Bound | None:
        held = None if event.type is EventType.DELETED else event.value.held
        if held is None:
            return self._take(event.key, None, None, _LABELLED)
        state = event.value.state
        replica: tuple[int, int, int | None] | None
        if state is None:
            found = self._gated_job(event.uid)
            replica = None if found is None else (*found, None)
        else:
            replica = self._own(event.key, state, runs.get(state.job))
        return self._take(event.key, held, replica, _LABELLED)

    def _own(
        self, key: str, state: PodState, run: RunView | None
    ) -> tuple[int, int, int | None] | None:
        """(job, replica, attempt) of the plane's pod ``key`` when it is the pod the plane gives
        that replica of the run it holds (``run``: its job's; the name and the namespace too);
        None otherwise: a pod labelled as the plane's but of no run it holds (a stray the site
        deletes) holds its cards until it is gone, counted as use."""
        if run is None or run.attempt != state.attempt:
            return None
        name = pod_name(state.job, state.replica, state.attempt)
        if key != f"{self.config.namespace(run.tenant)}/{name}":
            return None
        return state.job, state.replica, state.attempt

    def _take(
        self,
        key: str,
        record: PodRecord | None,
        replica: tuple[int, int, int | None] | None,
        origin: str,
    ) -> bound_cards.Bound | None:
        """The pod ``key`` as the watch ``origin`` sees it now: bound as ``record`` says (None:
        not bound, finished or gone), a replica of the plane's job ``replica`` (returned as the
        cards it was bound to, for the caller's batch to follow) or counted as use. A pod whose
        labels moved it from one watch to the other is told by both, in either order: the
        book's entry is the watch's that counted it last, and only that watch's word that it
        holds nothing takes it out."""
        plane = self._plane
        assert plane is not None
        holder = holder_of(key)
        counted = record is not None and replica is None

        def make(take_id: Callable[[], int]) -> tuple[Allocation, ...] | None:
            """Under the plane's lock: the book and the engine change together."""
            assert plane is not None
            what = self._use(plane, key, record) if counted and record is not None else None
            before = self._book.get(holder)
            if what is None:
                if before is None or before[2] != origin:
                    return None  # not held, or held as the other watch counts it
                del self._book[holder]
                plane.meter.foreign_ended((self.site, holder), plane.clock())
                log.info("site %s: %s holds nothing any more", self.site, holder)
                return ()
            held, devices, priority = what
            if before is not None and before[0] == held:
                self._book[holder] = (held, before[1], origin)  # the same cards: a status change
                return None
            allocs = pod_allocations(holder, devices, priority, take_id)
            self._book[holder] = (held, allocs, origin)
            self._meter(plane, key, priority, held[0], allocs)
            log.info("site %s: %s holds cards on node %s", self.site, holder, held[0])
            return allocs

        if counted or holder in self._book:  # (the book changes under the plane's lock)
            foreign_use.change(plane, self.site, holder, make)
        if replica is not None and record is not None:
            return self._bound(plane, key, record, replica)
        return None

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

    def _bound(
        self,
        plane: ControlPlane,
        key: str,
        rec: PodRecord,
        replica: tuple[int, int, int | None],
    ) -> bound_cards.Bound | None:
        """A plane job's pod bound: the cards it got, which the job's allocation follows when
        they are not those of the plane's placement (a kubectl user's pod, which the extender
        places on its own; ``server/plane/bound_cards.py``). None for a pod whose cards take
        more than one task (init containers beside the app's): it is left to its placement."""
        devices = rec.devices
        if rec.node is None or devices is None:
            return None
        parts = devices.charged()
        node = plane.node(devices.node)
        if len(parts) != 1 or node is None or not self._owns(node):
            return None
        shares = tuple((s.uuid, s.memory_mib, s.core_permille) for s in parts[0])
        job, index, attempt = replica
        return bound_cards.Bound(job, index, devices.node, shares, holder_of(key), attempt)

    def _use(
        self, plane: ControlPlane, key: str, rec: PodRecord
    ) -> tuple[_Held, PodDevices, int] | None:
        """(held key, PodDevices, priority) of the pod ``key`` bound as ``rec`` says, or None
        when it counts nothing here (a pod of a plane job is left out by the caller: its job's
        allocation counts it)."""
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
                holder_of(key),
                devices.node,
            )
            return None
        shares = sorted(
            (s.uuid, s.memory_mib, s.core_permille) for c in devices.charged() for s in c
        )
        return (devices.node, tuple(shares)), devices, rec.priority
