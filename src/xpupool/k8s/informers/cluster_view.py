"""The extender's picture of the cluster: ONE engine (``ClusterState`` + ``Engine``, as every front
has) kept in step with the Node and Pod informers, so that filter, prioritize and bind decide on what
the cluster holds now, and a restarted extender rebuilds the exact charges from the pods.

Nodes become ``xpupool.model.Node`` through an injected ``decode_node`` (HAMi's registration
annotations, xpupool's own; None: not a node of the pool); a Pod is charged to its cards through
an injected ``decode_pod_devices`` (HAMi's ``vgpu-devices-allocated``, xpupool's own; None: it
holds no managed device) from the moment it is assigned, bound or not: HAMi's scheduler charges a
pod that carries ``hami.io/vgpu-node`` and its device annotations before its Binding lands
(HAMi v2.10.0 ``scheduler.go`` ``onAddPod``), so a pod HAMi's ``Filter`` annotated holds its cards
here too. A pod bound to another node than the one it was assigned to holds nothing (its cards
are the other node's); deleted, Succeeded and Failed pods give back what they held. A cordon
(``spec.unschedulable``) is set on the live engine; any other inventory change (a node added,
removed, its devices or labels changed) marks the engine stale, and the next user rebuilds it from
the node records and re-applies every charge, oldest first, as the server's ``plane.build`` does:
inventory changes are rare and come in bursts (a relist, a rollout of the node agent), so one
rebuild beats patching columns per event. Building, re-applying and re-addressing are the engine
host's (``engine/host.py``), as they are for the server; the view's rule for a charge that no
longer fits is to log it and leave it waiting, unapplied, until an inventory change lets it in.

Allocation ids come from the host's one counter (``engine/allocation_ids.py``), handed to every
engine it builds and used for the charges the view makes from pods, so no two charges share an id
however often the engine is rebuilt (issue 43, item 3). Nothing needs persisting across an extender
restart: an id never leaves the process (a bind writes cards and shares on the pod, no id; charges
are keyed by pod UID), and a restarted view makes every charge afresh from the pods, each with a
new id.

Charges are keyed by pod UID. The extender places inside :meth:`ClusterView.engine_locked` and
records the result with :meth:`ClusterView.reserve`; when the bound pod arrives through the watch
with the same cards, the reservation simply becomes its charge (never counted twice); with other
cards, the pod's own annotation wins. Until the Binding lands a reservation stands whatever the
pod's annotations say (its bind writes them first), so a bind that fails, or a gang released,
gives it back with :meth:`ClusterView.unreserve`; the view then remembers the assignment it gave
back and does not charge the pod again for annotations still on it (the extender strips them,
``extender/verbs.py``; a pod charged from them held its cards until deleted). Filter takes a pod's own
stale assignment away first (:meth:`ClusterView.drop_assignment`), as HAMi's ``Filter`` does.
One lock guards the engine and the records.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from lightkube import operators
from lightkube.config.kubeconfig import SingleConfig

from xpupool.engine.engine import Engine
from xpupool.engine.host import EngineHost, HostedNode
from xpupool.engine.profile import DEFAULT_PROFILE, Profile
from xpupool.engine.verdict import Verdicts
from xpupool.k8s.codec import pod_charge
from xpupool.k8s.informers.kubeconfig import RawNode, RawPod
from xpupool.k8s.informers.watch import Event, EventType, Informer
from xpupool.model.allocation import Allocation, DeviceShare
from xpupool.model.device import Node
from xpupool.model.errors import Conflict, RequestError, XpupoolError

log = logging.getLogger(__name__)

TERMINAL_PHASES = ("Succeeded", "Failed")
# Bounds on what a decoder may hand over (hostile annotations): far above any real card or pod.
MAX_UUID_CHARS = 256
MAX_MIB = 1 << 30  # a card's memory, as DeviceIn allows
MAX_PERMILLE = 1_000_000  # a share's compute, over-commit factors included
MAX_CONTAINERS = 256
MAX_CARDS = 256
MAX_PRIORITY = 2_000_000_000  # kube's system-node-critical; PriorityClass values stay within
RELEASED_KEPT = 4096
"""Assignments given back that the view remembers (most recent kept): a pod's entry goes when
the pod is bound, assigned anew, stripped of its assignment or deleted."""


@dataclass(frozen=True, slots=True)
class CardShare:
    """One card's part of one container: ``memory_mib`` of its memory and ``core_permille``
    thousandths of its compute (the engine's units; a decoder turns HAMi's percent into them)."""

    uuid: str
    memory_mib: int
    core_permille: int

    def __post_init__(self) -> None:
        if not isinstance(self.uuid, str) or not 0 < len(self.uuid) <= MAX_UUID_CHARS:
            raise RequestError("uuid", self.uuid, f"must be 1..{MAX_UUID_CHARS} characters")
        _check_amount("memory_mib", self.memory_mib, MAX_MIB)
        _check_amount("core_permille", self.core_permille, MAX_PERMILLE)


@dataclass(frozen=True, slots=True)
class PodDevices:
    """What a bound pod was given on ``node``: per container (HAMi's order: init containers first)
    the cards it uses; ``cpu_milli``/``memory_mib`` of the host when the decoder charges them too.
    ``roles`` says how long each container runs (none given: every one is an app container) and
    ``init_done`` whether its init containers have all succeeded: the pod is charged
    :meth:`charged`, not the sum of its containers (``pod_charge.py``)."""

    node: str
    containers: tuple[tuple[CardShare, ...], ...]
    cpu_milli: int = 0
    memory_mib: int = 0
    roles: tuple[pod_charge.Role, ...] = ()
    init_done: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.node, str) or not 0 < len(self.node) <= 253:
            raise RequestError("node", self.node, "must be a node name of 1..253 characters")
        if len(self.containers) > MAX_CONTAINERS:
            raise RequestError("containers", len(self.containers), f"more than {MAX_CONTAINERS}")
        for i, shares in enumerate(self.containers):
            if len(shares) > MAX_CARDS:
                raise RequestError(f"containers[{i}]", len(shares), f"more than {MAX_CARDS} cards")
            for j, share in enumerate(shares):
                if not isinstance(share, CardShare):
                    raise RequestError(f"containers[{i}][{j}]", share, "must be a CardShare")
        _check_amount("cpu_milli", self.cpu_milli, 1 << 40)
        _check_amount("memory_mib", self.memory_mib, 1 << 40)
        if len(self.roles) > MAX_CONTAINERS or not all(
            isinstance(r, pod_charge.Role) for r in self.roles
        ):
            raise RequestError("roles", self.roles[:4], f"at most {MAX_CONTAINERS} Role values")
        per_card: dict[str, list[int]] = {}  # what the charge of a card can reach, at most
        for shares in self.containers:
            for share in shares:
                total = per_card.setdefault(share.uuid, [0, 0])
                total[0] += share.memory_mib
                total[1] += share.core_permille
                if total[0] > MAX_MIB or total[1] > MAX_PERMILLE:
                    raise RequestError("containers", share.uuid, "more than a card can hold")

    def charged(self) -> tuple[tuple[CardShare, ...], ...]:
        """The shares the pod holds, one tuple per task it holds on its cards (``pod_charge``
        parts: per card the larger of its init containers' peak and its running containers'
        sum, the running containers' alone once ``init_done``)."""
        shares = [[(s.uuid, s.memory_mib, s.core_permille) for s in c] for c in self.containers]
        parts = pod_charge.charge(shares, self.roles, self.init_done)
        return tuple(tuple(CardShare(*s) for s in part.shares) for part in parts)


def _check_amount(field: str, value: object, limit: int) -> None:
    """A whole number in 0..limit, else a RequestError on ``field``: a negative share would
    give capacity back to the engine that nobody released."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= limit:
        raise RequestError(field, value, f"must be a whole number in 0..{limit}")


NodeDecoder = Callable[[dict[str, Any]], Node | None]
PodDecoder = Callable[[dict[str, Any]], PodDevices | None]


@dataclass(frozen=True, slots=True)
class NodeRecord:
    """A Node as the view keeps it: the decoded node (None: not in the pool) and its cordon."""

    node: Node | None
    schedulable: bool


@dataclass(frozen=True, slots=True)
class PodRecord:
    """A Pod as the view keeps it: where it is bound (None: not yet) and what it holds (None:
    nothing managed, or finished, or bound to another node than the one it was assigned to); a
    pod assigned but not yet bound holds its cards on the node it was assigned to
    (``devices.node``)."""

    name: str
    node: str | None
    priority: int
    devices: PodDevices | None


# (node, host CPU millicores, host memory MiB, sorted (card UUID, MiB, permille) shares)
ChargeKey = tuple[str, int, int, tuple[tuple[str, int, int], ...]]
# (node, sorted card UUIDs): an assignment given back, whatever amounts its annotations round to
Assignment = tuple[str, tuple[str, ...]]


@dataclass(slots=True)
class _Charge:
    """What one pod holds in the engine: its allocations (one per task it holds on its cards,
    ``pod_charge.py``), whether they are applied in the current engine, and whether they are
    still only a reservation."""

    allocations: tuple[Allocation, ...]
    applied: bool
    reserved: bool
    key: ChargeKey
    pod: bool = True
    """False: held for no pod yet (a gang's place, ``gang.py``), left out of :meth:`charges`."""
    name: str = ""
    """The pod's ``namespace/name`` (known once a pod event names it)."""
    placed: tuple[Allocation, ...] = ()
    """A reservation's placement, one allocation per container that asks for devices (what its
    bind writes on the pod); the same as ``allocations`` unless init containers share cards."""
    bound: bool = False
    """The pod's Binding has landed (``spec.nodeName``); False for a reservation and for a pod
    charged from its assignment annotations alone."""


class ClusterView:
    """Nodes and pods of one cluster in one engine. Feed it events (:meth:`on_node`,
    :meth:`on_pod`), or let :meth:`watch` start the two informers that do."""

    def __init__(
        self,
        decode_node: NodeDecoder,
        decode_pod_devices: PodDecoder,
        *,
        profile: Profile | str = DEFAULT_PROFILE,
        profiles: dict[str, Profile] | None = None,
        seed: int = 0,
        defer_learning: bool = False,
    ) -> None:
        self.decode_node = decode_node
        self.decode_pod_devices = decode_pod_devices
        self.host = EngineHost(profile, profiles=profiles, seed=seed, defer_learning=defer_learning)
        """The engine over the pool and its allocation ids; with ``defer_learning`` the engine
        re-learns its online workload only when told (``k8s/extender/learner.py``), not inside the verb
        that made it due."""
        self.reservations = 0
        """Placements recorded so far (:meth:`reserve`): the learner's sign that pods arrived."""
        self._lock = threading.RLock()
        self.condition = threading.Condition(self._lock)
        """A condition on the view's lock: a gang's binds wait on it (``gang.py``) without
        holding the engine from filters."""
        self._nodes: dict[str, NodeRecord] = {}
        self._charges: dict[str, _Charge] = {}
        self._evicted: dict[str, _Charge] = {}
        """Pods being evicted for a preemptor (``preemption.py``): their shares are the
        preemptor's already, so their events change nothing until they are gone."""
        self._gone: set[str] = set()
        """Evicted pods the API says are gone before their DELETED event came (:meth:`gone`)."""
        self._released: OrderedDict[str, Assignment] = OrderedDict()
        """Pod UID -> the assignment given back for it (:meth:`unreserve`,
        :meth:`drop_assignment`): the pod's annotations that still say so charge nothing."""
        self._stale = True
        self._informers: list[Informer[Any]] = []
        self.node_seen: Callable[[str], None] | None = None
        """Told the name of every Node event, whatever changed (a bind waiting for HAMi's node
        lock to go, ``node_lock.py``, reads the Node again at once instead of at its next poll)."""

    # ------------------------------------------------------------------ the engine
    @contextmanager
    def engine_locked(self) -> Iterator[Engine]:
        """The engine, brought up to date, with the view's lock held for the ``with`` block:
        filter, place and :meth:`reserve` inside one block so no event moves the state between."""
        with self._lock:
            yield self._current()

    @property
    def rebuilds(self) -> int:
        """Engines built so far (each inventory change that was used costs one)."""
        return self.host.rebuilds

    def verdicts(self) -> Verdicts:
        """Whether a request could ever fit the pool, with the profile's settings (the host's,
        on the engine served); call inside :meth:`engine_locked`."""
        with self._lock:
            self._current()
            return self.host.verdicts

    def _current(self) -> Engine:
        if self.host.engine is None or self._stale:
            self._rebuild()
        engine = self.host.engine
        assert engine is not None
        return engine

    def _rebuild(self) -> None:
        """A fresh engine from the node records, every charge re-applied oldest first (the
        host's); the view's rule for a charge whose node or card is gone, or that would
        over-commit: it waits unapplied (logged) until an inventory change lets it in again."""
        done = self.host.rebuild(
            self._pool(), ((uid, charge.allocations) for uid, charge in self._charges.items())
        )
        self._stale = False
        for charge in self._charges.values():
            charge.applied = False
        for uid, allocations in done.kept.items():
            charge = self._charges[uid]
            charge.allocations, charge.applied = tuple(allocations), True
        for refused in done.refused:
            log.warning("charge of pod %s not applied: %s", refused.owner, refused.error)

    def _pool(self) -> list[HostedNode]:
        """The decoded nodes by name with their cordons; a node that claims a card UUID an
        earlier one has is left out (logged): two nodes cannot hold one card, and one bad
        annotation must not stop the rebuild of the whole pool."""
        seen: dict[str, str] = {}
        pool: list[HostedNode] = []
        for name in sorted(self._nodes):
            node = self._nodes[name].node
            if node is None:
                continue
            clash = next((d.uuid for d in node.devices if d.uuid in seen), None)
            if clash is not None:
                log.warning(
                    "node %s left out of the pool: card %s is node %s's", name, clash, seen[clash]
                )
                continue
            seen.update((d.uuid, name) for d in node.devices)
            pool.append(HostedNode(node, self._nodes[name].schedulable))
        return pool

    def _apply(self, uid: str, charge: _Charge) -> None:
        """Apply ``charge`` in the current engine (all its allocations or none; the host's)."""
        assert not charge.applied
        try:
            charge.allocations = self.host.apply(charge.allocations)
        except Conflict as exc:
            log.warning("charge of pod %s not applied: %s", uid, exc)
            return
        charge.applied = True

    def _unapply(self, charge: _Charge) -> None:
        engine = self.host.engine
        if charge.applied and engine is not None and not self._stale:
            for alloc in charge.allocations:
                engine.release(alloc.id)
        charge.applied = False

    # ------------------------------------------------------------------ the extender's side
    def reserve(
        self,
        pod_uid: str,
        allocations: Sequence[Allocation],
        *,
        pod: bool = True,
        placed: Sequence[Allocation] | None = None,
        name: str = "",
    ) -> None:
        """Record ``allocations`` (already placed in this view's engine, inside the same
        :meth:`engine_locked` block) as what pod ``pod_uid`` (``name``: ``namespace/name``, what a
        namespace's quota counts by) holds until its bound form arrives; with ``pod`` False, as a
        place held under a key of the caller's (a gang's, handed to a pod later with
        :meth:`rekey`). ``placed``: the placement they charge, one allocation per container that
        asks for devices, when it differs from them (``pod_placement.py``: init containers).
        Raises Conflict if the key already holds something."""
        with self._lock:
            if pod_uid in self._charges:
                raise Conflict(f"pod {pod_uid} already holds devices")
            allocs = tuple(allocations)
            for alloc in allocs:
                self.host.ids.seen(alloc.id)  # taken from it already, unless placed elsewhere
            given = allocs if placed is None else tuple(placed)
            charge = _Charge(allocs, True, True, _charge_key(allocs), pod, name, placed=given)
            self._charges[pod_uid] = charge
            self.reservations += 1

    def rekey(self, old: str, new: str) -> None:
        """Hand the reservation held under ``old`` (a gang's slot) to pod ``new``, unchanged in
        the engine. Raises Conflict if ``old`` holds no reservation or ``new`` already holds
        something."""
        with self._lock:
            charge = self._charges.get(old)
            if charge is None or not charge.reserved:
                raise Conflict(f"{old} holds no reservation")
            if new in self._charges:
                raise Conflict(f"pod {new} already holds devices")
            charge.pod = True
            self._charges[new] = self._charges.pop(old)

    def unreserve(self, pod_uid: str) -> bool:
        """Give back what :meth:`reserve` took for a pod that will not bind (bind failed, timed
        out, its gang released); False if the pod holds nothing or is already bound with it.
        The annotations its bind may have written already charge nothing until the pod is bound
        or assigned anew."""
        with self._lock:
            charge = self._charges.get(pod_uid)
            if charge is None or not charge.reserved:
                return False
            self._unapply(charge)
            del self._charges[pod_uid]
            if charge.pod:
                self._release(pod_uid, charge.key)
            return True

    def drop_assignment(self, pod_uid: str) -> bool:
        """Give back the charge of a pod assigned but not bound that it holds from its own
        annotations (not a reservation), as HAMi's ``Filter`` first takes the pod's own charge
        away (``TakeAndDeletePod``): the pod is being judged again, so that assignment is dead
        (a bind that failed before its annotations could be stripped, an extender restarted in
        between). False if the pod holds no such charge."""
        with self._lock:
            charge = self._charges.get(pod_uid)
            if charge is None or charge.reserved or charge.bound or not charge.pod:
                return False
            self._unapply(charge)
            del self._charges[pod_uid]
            self._release(pod_uid, charge.key)
            return True

    def _release(self, pod_uid: str, key: ChargeKey) -> None:
        """Remember the assignment of ``key`` given back for the pod: its node and cards, not
        its amounts (a bind writes compute in the type's units, rounded up, so the annotations
        can name other amounts than the hold had). Only the pod's own scheduler writes a new
        assignment, and it holds a reservation while it does."""
        self._released[pod_uid] = _assignment(key)
        self._released.move_to_end(pod_uid)
        while len(self._released) > RELEASED_KEPT:
            self._released.popitem(last=False)

    def charges(self) -> dict[str, tuple[Allocation, ...]]:
        """Pod UID -> the allocations it holds (applied or waiting), a copy; places held for no
        pod yet are not in it."""
        with self._lock:
            return {uid: c.allocations for uid, c in self._charges.items() if c.pod}

    def holders(self) -> dict[str, tuple[str, tuple[Allocation, ...]]]:
        """Pod UID -> (``namespace/name``, the allocations applied in the engine) for every pod
        whose charge is applied: what preemption may choose victims from."""
        with self._lock:
            return {
                uid: (c.name, c.allocations)
                for uid, c in self._charges.items()
                if c.pod and c.applied
            }

    def holds(self, pod_uid: str) -> bool:
        """True when the pod holds devices in this view (bound, reserved or being evicted)."""
        with self._lock:
            return pod_uid in self._charges or pod_uid in self._evicted

    def reservation(self, pod_uid: str) -> tuple[Allocation, ...] | None:
        """What :meth:`reserve` placed for a pod not bound yet (its charge applied in the
        engine), one allocation per container that asks for devices, or None."""
        with self._lock:
            charge = self._charges.get(pod_uid)
            if charge is None or not charge.reserved or not charge.applied:
                return None
            return charge.placed

    def placed(self, pod_uid: str) -> tuple[Allocation, ...]:
        """What the pod's reservation placed, applied or waiting (one allocation per container
        that asks for devices: what its bind writes); () when it holds no reservation."""
        with self._lock:
            charge = self._charges.get(pod_uid)
            return () if charge is None or not charge.reserved else charge.placed

    def evict(self, uids: Sequence[str]) -> None:
        """Give back the shares of pods being evicted (inside an :meth:`engine_locked` block):
        until their DELETED event, or :meth:`unevict`, their events change nothing."""
        with self._lock:
            for uid in uids:
                charge = self._charges.pop(uid, None)
                if charge is not None:
                    self._unapply(charge)
                    self._evicted[uid] = charge

    def unevict(self, uid: str) -> None:
        """Charge a pod whose eviction was refused again (it keeps running)."""
        with self._lock:
            charge = self._evicted.pop(uid, None)
            self._gone.discard(uid)
            if charge is None or uid in self._charges:
                return
            self._charges[uid] = charge
            if self.host.engine is not None and not self._stale:
                self._apply(uid, charge)

    def evicting(self, uid: str) -> bool:
        """True while an evicted pod has not yet gone from the cluster."""
        with self._lock:
            return uid in self._evicted and uid not in self._gone

    def gone(self, uid: str) -> None:
        """The API says an evicted pod is gone, ahead of this view's watch: no longer
        :meth:`evicting`; its events still change nothing until its DELETED one."""
        with self._lock:
            if uid in self._evicted:
                self._gone.add(uid)

    def nodes(self) -> dict[str, NodeRecord]:
        with self._lock:
            return dict(self._nodes)

    def knows_node(self, name: str) -> bool:
        """Whether ``name`` is a Node the informer has listed, of the pool or not."""
        with self._lock:
            return name in self._nodes

    # ------------------------------------------------------------------ events
    def node_record(self, obj: dict[str, Any]) -> NodeRecord:
        """An informer transform: the decoded Node (None when the decoder says it is no node of
        the pool or cannot read it: logged) and whether it is schedulable."""
        name = obj["metadata"]["name"]
        spec = obj.get("spec")
        unschedulable = isinstance(spec, Mapping) and spec.get("unschedulable") is True
        try:
            node = self.decode_node(obj)
        except (XpupoolError, ValueError) as exc:
            log.warning("node %s: devices unreadable, left out of the pool: %s", name, exc)
            node = None
        if node is not None and node.name != name:
            log.warning("node %s: decoder named it %r; left out of the pool", name, node.name)
            node = None
        return NodeRecord(node, not unschedulable)

    def pod_record(self, obj: dict[str, Any]) -> PodRecord:
        """An informer transform: :func:`read_pod` with this view's decoder."""
        return read_pod(obj, self.decode_pod_devices)

    def on_node(self, event: Event[NodeRecord]) -> None:
        """Consume a node informer event."""
        if self.node_seen is not None:
            self.node_seen(event.key)
        with self._lock:
            before = self._nodes.get(event.key)
            if event.type is EventType.DELETED:
                if before is not None:
                    del self._nodes[event.key]
                    self._stale = self._stale or before.node is not None
                return
            rec = event.value
            self._nodes[event.key] = rec
            if before is not None and before.node == rec.node:
                engine = self.host.engine
                live = engine is not None and not self._stale and rec.node is not None
                if live and before.schedulable != rec.schedulable:
                    assert engine is not None
                    engine.set_node_schedulable(event.key, rec.schedulable)
                return
            self._stale = True

    def on_pod(self, event: Event[PodRecord]) -> None:
        """Consume a pod informer event."""
        with self._lock:
            if event.uid in self._evicted:  # its shares are a preemptor's already
                if event.type is EventType.DELETED:
                    del self._evicted[event.uid]
                    self._gone.discard(event.uid)
                return
            charge = self._charges.get(event.uid)
            if event.type is EventType.DELETED:
                self._released.pop(event.uid, None)
                if charge is not None:
                    self._unapply(charge)
                    del self._charges[event.uid]
                return
            rec = event.value
            bound = rec.node is not None
            if not bound and charge is not None and charge.reserved:
                return  # a reservation stays until bound, unreserved or gone
            key = None if rec.devices is None else _devices_key(rec.devices)
            if not bound and key is not None and self._released.get(event.uid) == _assignment(key):
                return  # the assignment of a hold given back, its annotations not yet stripped
            self._released.pop(event.uid, None)
            if rec.devices is None or key is None:
                if charge is not None:
                    self._unapply(charge)
                    del self._charges[event.uid]
                return
            if charge is not None and charge.key == key:
                charge.reserved = False  # the reservation is the bound pod's charge now
                charge.bound = bound
                charge.name = rec.name
                return
            if charge is not None:
                self._unapply(charge)
            allocs = self._allocations(rec, rec.devices)
            new = _Charge(allocs, False, False, key, name=rec.name, bound=bound)
            self._charges[event.uid] = new
            if self.host.engine is not None and not self._stale:
                self._apply(event.uid, new)

    def _allocations(self, rec: PodRecord, devices: PodDevices) -> tuple[Allocation, ...]:
        return pod_allocations(rec.name, devices, rec.priority, self.host.ids.take)

    # ------------------------------------------------------------------ informers
    def watch(self, config: SingleConfig, *, resync_s: float = 300.0) -> ClusterView:
        """Start a Node and a Pod informer feeding this view (pods that finished are filtered
        out by the apiserver: leaving the selection deletes them here)."""
        if self._informers:
            raise RuntimeError("the view already watches")
        nodes: Informer[NodeRecord] = Informer(
            config, RawNode, self.node_record, self.on_node, resync_s=resync_s, name="nodes"
        )
        pods: Informer[PodRecord] = Informer(
            config,
            RawPod,
            self.pod_record,
            self.on_pod,
            fields={"status.phase": operators.not_in(list(TERMINAL_PHASES))},
            resync_s=resync_s,
            name="pods",
        )
        self._informers = [nodes, pods]
        nodes.start()
        pods.start()
        return self

    @property
    def informers(self) -> tuple[Informer[Any], ...]:
        return tuple(self._informers)

    def wait_synced(self, timeout_s: float | None = None) -> bool:
        """True once every informer has delivered its first list (within ``timeout_s``); the
        engine is built then, so the first filter does not pay for it."""
        synced = all(i.wait_synced(timeout_s) for i in self._informers)
        if synced:
            with self.engine_locked():
                pass
        return synced

    def stop(self) -> None:
        for informer in self._informers:
            informer.stop()
        self._informers = []


def read_pod(obj: Mapping[str, Any], decode: PodDecoder) -> PodRecord:
    """Where a pod is bound and what it holds: its assignment, bound or not (HAMi charges a pod
    from its ``Filter``'s annotations on), unless finished or bound to another node than the
    assignment names (logged); an unreadable charge is logged and counts as nothing. The
    extender's view and the plane's Kubernetes site read pods through it."""
    meta = obj["metadata"]
    name = f"{meta.get('namespace', '')}/{meta['name']}"
    spec = obj.get("spec") if isinstance(obj.get("spec"), Mapping) else {}
    status = obj.get("status") if isinstance(obj.get("status"), Mapping) else {}
    assert isinstance(spec, Mapping) and isinstance(status, Mapping)
    node = spec.get("nodeName")
    node = node if isinstance(node, str) and node else None
    priority = spec.get("priority", 0)
    if isinstance(priority, bool) or not isinstance(priority, int):
        priority = 0
    priority = max(-MAX_PRIORITY, min(MAX_PRIORITY, priority))
    if status.get("phase") in TERMINAL_PHASES:
        return PodRecord(name, node, priority, None)
    try:
        devices = decode(dict(obj))
    except (XpupoolError, ValueError) as exc:
        log.warning("pod %s: device charge unreadable, counted as none: %s", name, exc)
        devices = None
    if devices is not None and node is not None and devices.node != node:
        log.warning("pod %s: charge names node %r, pod is on %r", name, devices.node, node)
        devices = None
    return PodRecord(name, node, priority, devices)


def pod_allocations(
    name: str, devices: PodDevices, priority: int, take_id: Callable[[], int]
) -> tuple[Allocation, ...]:
    """One engine allocation per task the pod ``name`` holds (:meth:`PodDevices.charged`; host
    CPU and memory on the first), each with a new id from ``take_id`` (the front's host counter);
    slots are fixed when applied. The extender's view and the plane's Kubernetes site charge a
    pod through it, so both count its cards alike."""
    out: list[Allocation] = []
    parts = [c for c in devices.charged() if c] or (
        [()] if devices.cpu_milli or devices.memory_mib else []
    )
    for i, shares in enumerate(parts):
        out.append(
            Allocation(
                id=take_id(),
                request_name=name,
                replica=i,
                node=devices.node,
                node_index=-1,
                cpu_milli=devices.cpu_milli if i == 0 else 0,
                memory_mib=devices.memory_mib if i == 0 else 0,
                devices=tuple(
                    DeviceShare(s.uuid, -1, s.memory_mib, s.core_permille) for s in shares
                ),
                priority=priority,
            )
        )
    return tuple(out)


def _charge_key(allocs: Sequence[Allocation]) -> ChargeKey:
    """What a charge holds, ignoring ids, slots and container order: its node, host CPU and
    memory, and its (card, MiB, permille) shares."""
    node = allocs[0].node if allocs else ""
    shares = sorted((d.uuid, d.memory_mib, d.core_permille) for a in allocs for d in a.devices)
    cpu, mem = sum(a.cpu_milli for a in allocs), sum(a.memory_mib for a in allocs)
    return node, cpu, mem, tuple(shares)


def _assignment(key: ChargeKey) -> Assignment:
    return key[0], tuple(sorted(uuid for uuid, _, _ in key[3]))


def _devices_key(devices: PodDevices) -> ChargeKey:
    shares = sorted((s.uuid, s.memory_mib, s.core_permille) for c in devices.charged() for s in c)
    return devices.node, devices.cpu_milli, devices.memory_mib, tuple(shares)
