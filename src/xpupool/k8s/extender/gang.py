"""Gangs in the extender: the pods of one group are placed all or none.

kube-scheduler has a Permit stage where coscheduling holds a group's pods until all are ready; an
extender has none, so the group is held here instead. The first member ``filter`` sees reserves
places ("slots") for the WHOLE group in one engine transaction (the engine's own gang placement,
``Engine.place`` with ``gang``: all replicas or none), each slot a node plus its allocations,
recorded in the cluster view under a key of its own so no other pod can take the shares. Every
member is then filtered to the nodes of the slots it may take. A member's ``bind`` takes a slot on
the chosen node (the slot's reservation becomes the pod's), writes its annotations and waits until
every slot is taken by a member that reached bind; then all post their Bindings. A bind that waits
longer than ``wait_s`` (kept under kube-scheduler's ``httpTimeout``) releases every reservation
of the group and every waiting bind answers Error, so kube-scheduler puts the pods back in its queue
and the next attempt starts over. A group the cluster cannot hold now is refused on every node with
how many of its members fit.

A group comes from the pod's ``scheduling.x-k8s.io/pod-group`` label, the size from that PodGroup's
``spec.minMember`` (scheduler-plugins ``apis/scheduling/v1alpha1/types.go``, ``PodGroupLabel`` and
``PodGroupSpec.MinMember``, commit 903da7df82cb8794dda8f2d510ba1156111662dd), read with a GET per
group and a short cache (:class:`PodGroupSizes`); or from xpupool's annotations ``xpupool.io/gang``
(the group's name) and ``xpupool.io/gang-size``. Groups are per namespace, as coscheduling's
``GetPodGroupFullName`` (the reader is ``k8s/informers/pod_groups.py``, which the plane's site
shares for kubectl users' gangs). Once a group has bound, further pods of it within ``COMPLETED_TTL_S``
are placed one by one, as coscheduling lets members beyond ``minMember`` schedule.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from xpupool.engine import Engine
from xpupool.engine.outcomes import (
    GangBindTimeout,
    GangConflict,
    GangMemberDoesNotFit,
    GangMembersLate,
    GangNeedsUid,
    GangNoFreePlace,
    GangNoPlaceForPod,
    GangOtherDevices,
    GangPlaceElsewhere,
    GangRefusal,
    GangReleased,
    GangSizeMismatch,
    GangTooFewFit,
    render,
)
from xpupool.k8s.codec.pod_request import PodDemand
from xpupool.k8s.extender.pod_placement import PodPlacement, place_containers
from xpupool.k8s.informers.cluster_view import ClusterView
from xpupool.k8s.informers.pod_groups import (  # the reader, shared with the plane's site
    COMPLETED_KEPT,
    GANG_ANNOTATION,
    GANG_SIZE_ANNOTATION,
    MAX_GANG_SIZE,
    POD_GROUP_LABEL,
    GroupClaim,
    PodGroupSizes,
    SizeLookup,
    group_claim,
    lightkube_podgroup_getter,
    min_member,
)
from xpupool.model.allocation import Allocation
from xpupool.model.errors import Conflict, RequestError
from xpupool.model.request import Request

__all__ = [  # the reader's names too, where the extender's modules and tests import them
    "DEFAULT_WAIT_S",
    "GANG_ANNOTATION",
    "GANG_SIZE_ANNOTATION",
    "MAX_GANG_SIZE",
    "POD_GROUP_LABEL",
    "Gangs",
    "GroupClaim",
    "PodGroupSizes",
    "group_claim",
    "lightkube_podgroup_getter",
    "min_member",
]

log = logging.getLogger(__name__)

DEFAULT_WAIT_S = 25.0
"""How long a member's bind waits for the rest: a few seconds under the chart's 30 s httpTimeout,
so the bind answers before kube-scheduler gives up on it."""
SLOT_PREFIX = "xpupool-gang:"
"""Reservations of slots no member has taken are kept in the view under ``SLOT_PREFIX`` + group
key + ``#`` + slot number (a pod UID never starts so), as places held for no pod: preemption,
which names pods by UID, does not see them."""
COMPLETED_TTL_S = 600.0


# ---------------------------------------------------------------------- bookkeeping
@dataclass(slots=True)
class Slot:
    """One member's place: ``node``, the view key its reservation is under (the slot's own key
    until its member's bind takes it, then the member's UID), the member that claimed it in
    filter or took it in bind (None: free), whether that member reached bind, and whether its
    Binding was posted."""

    node: str
    key: str
    member: str | None = None
    waiting: bool = False
    bound: bool = False


@dataclass(slots=True)
class Group:
    key: str
    size: int
    template: tuple[Request, ...]
    slots: list[Slot]
    deadline: float
    failed: GangRefusal | None = None
    done: bool = False
    members: dict[str, int] = field(default_factory=dict)

    def free(self) -> list[Slot]:
        return [s for s in self.slots if s.member is None]


@dataclass(frozen=True, slots=True)
class Verdict:
    """Filter's answer for a group member: the nodes it may go to and, per other node, why not
    (rendered where the extender answers, ``engine/outcomes.py``); ``refused``: the engine could
    not hold the group now (the extender teaches the member's requests to the engine's learners
    as refused, as it does a pod no node holds)."""

    fits: list[str]
    failed: dict[str, GangRefusal]
    refused: bool = False


class Gangs:
    """Every group the extender holds places for, over one cluster view. Its lock is the view's
    (a condition on it), so reserving in the engine and recording slots are one step, and a
    waiting bind lets filters and other binds go on."""

    def __init__(
        self,
        view: ClusterView,
        *,
        sizes: SizeLookup | None = None,
        wait_s: float = DEFAULT_WAIT_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not 0 < wait_s <= 600:
            raise RequestError("gang wait", wait_s, "must be in (0, 600] seconds")
        self.view = view
        self.sizes = sizes
        self.wait_s = wait_s
        self._clock = clock
        self._cond: threading.Condition = view.condition
        self._groups: dict[str, Group] = {}
        self._completed: OrderedDict[str, float] = OrderedDict()

    # ------------------------------------------------------------------ sizes
    def size_of(self, claim: GroupClaim) -> int:
        """The group's size: the pod's annotation, else its PodGroup's minMember (I/O: call
        outside the view's lock)."""
        if claim.size is not None:
            return claim.size
        if self.sizes is None:
            raise RequestError(
                f"metadata.labels[{POD_GROUP_LABEL!r}]", claim.name, "no PodGroup reader configured"
            )
        return self.sizes(claim.namespace, claim.name)

    def completed(self, claim: GroupClaim) -> bool:
        """Has this group bound within COMPLETED_TTL_S? Its further pods are placed alone."""
        with self._cond:
            at = self._completed.get(claim.key)
            return at is not None and self._clock() - at < COMPLETED_TTL_S

    # ------------------------------------------------------------------ filter
    def judge(
        self,
        engine: Engine,
        claim: GroupClaim,
        size: int,
        demand: PodDemand,
        uid: str,
        names: Sequence[str],
    ) -> Verdict:
        """Filter for a member (call inside ``view.engine_locked()``): reserve the whole group if
        nobody has, then keep only the node of this pod's place, claiming a free one among
        ``names`` (the nodes kube-scheduler's own filters passed) on its first filter. One node
        per member: were members offered every node with a free place, kube-scheduler (which
        binds asynchronously) could send more members to a node than it has places."""
        if not uid:
            return Verdict([], dict.fromkeys(names, GangNeedsUid()))
        with self._cond:
            self._sweep()
            group = self._groups.get(claim.key)
            if group is None:
                placed = self._reserve(engine, claim.key, size, demand)
                if not isinstance(placed, Group):
                    return Verdict([], dict.fromkeys(names, placed), refused=True)
                group = placed
            why = _mismatch(group, size, demand)
            if why is not None:
                return Verdict([], dict.fromkeys(names, why))
            kept = set(names)
            slot = next((s for s in group.slots if s.member == uid), None)
            if slot is None:  # claim a free place on a node kube-scheduler's own filters kept
                slot = next((s for s in group.free() if s.node in kept), None)
                if slot is None:
                    return Verdict([], dict.fromkeys(names, GangNoFreePlace(group.key)))
                slot.member = uid
            if slot.node in kept:
                # Its node alone, as filter answers a pod that fits (extender.py): kube-scheduler
                # reads the other nodes' reasons only when nothing fits, and 5,000 of them made
                # each member's answer 300 kB to write and read.
                return Verdict([slot.node], {})
            other = GangPlaceElsewhere(group.key, slot.node)
            return Verdict([], dict.fromkeys(names, other))

    def _reserve(
        self, engine: Engine, key: str, size: int, demand: PodDemand
    ) -> Group | GangTooFewFit | GangMemberDoesNotFit:
        """Place ``size`` copies of the pod in one transaction (the first container as the
        engine's gang, the others beside each copy on its node, as ``pod_placement`` places a
        pod's containers) and record them; or why not."""
        first = demand.demands[0].request
        gang = replace(first, replicas=size, gang=size > 1)
        slots: list[tuple[str, PodPlacement]] = []
        with engine.transaction() as txn:
            placement = engine.place(gang, txn=txn)
            if not placement.ok:
                txn.rollback()
                failure = placement.failures[0]
                return GangTooFewFit(key, failure.replica, size, failure)
            for alloc in placement.allocations:
                i = engine.node_index(alloc.node)
                assert i is not None, "the engine placed it on a node of its pool"
                pod = place_containers(engine, demand, i, txn, first=alloc)
                if not isinstance(pod, PodPlacement):
                    txn.rollback()
                    return GangMemberDoesNotFit(key, len(slots) + 1, size)
                slots.append((alloc.node, pod))
            txn.commit()
        group = Group(
            key,
            size,
            tuple(d.request for d in demand.demands),
            [],
            self._clock() + self.wait_s,
        )
        for i, (node, held) in enumerate(slots):
            slot_key = f"{SLOT_PREFIX}{key}#{i}"
            self.view.reserve(slot_key, held.charge, pod=False, placed=held.placed)
            group.slots.append(Slot(node, slot_key))
        self._groups[key] = group
        log.info("gang %s: %d places reserved on %s", key, size, sorted({n for n, _ in slots}))
        return group

    # ------------------------------------------------------------------ bind
    def take(
        self, claim: GroupClaim, size: int, demand: PodDemand, uid: str, node: str
    ) -> tuple[Allocation, ...] | GangRefusal:
        """A member's bind takes its slot on ``node``: the slot's reservation becomes the pod's.
        The pod's allocations, or why not (nothing changed)."""
        with self._cond:
            self._sweep()
            group = self._groups.get(claim.key)
            if group is None or group.failed is not None:
                return GangReleased(claim.key)
            why = _mismatch(group, size, demand)
            if why is not None:
                return why
            slot = next((s for s in group.slots if s.member == uid), None)
            if slot is not None and slot.node != node:
                return GangPlaceElsewhere(group.key, slot.node, node)
            if slot is None:  # not filtered here (a restarted extender): a free place on node
                slot = next((s for s in group.free() if s.node == node), None)
                if slot is None:
                    return GangNoFreePlace(group.key, node)
            if slot.key != uid:
                try:
                    self.view.rekey(slot.key, uid)
                except Conflict as exc:
                    return GangConflict(group.key, str(exc))
                slot.key, slot.member = uid, uid
            return self.view.placed(uid)

    def wait(self, claim: GroupClaim, uid: str) -> GangRefusal | None:
        """The member reached bind: wait until every slot's member has, then None (post the
        Binding now); or why not, after which every reservation of the group is released."""
        deadline = self._clock() + self.wait_s
        with self._cond:
            group = self._groups.get(claim.key)
            slot = (
                None if group is None else next((s for s in group.slots if s.member == uid), None)
            )
            if group is None or slot is None:
                return GangNoPlaceForPod(claim.key)
            slot.waiting = True
            group.deadline = max(group.deadline, deadline)
            self._cond.notify_all()
            while True:
                if group.failed is not None:
                    return group.failed
                if all(s.waiting for s in group.slots):
                    return None
                left = deadline - self._clock()
                if left <= 0:
                    ready = sum(s.waiting for s in group.slots)
                    why = GangBindTimeout(group.key, ready, group.size, self.wait_s)
                    self._fail(group, why)
                    return why
                self._cond.wait(min(left, 1.0))

    def fail(self, claim: GroupClaim, why: GangRefusal) -> None:
        """Release every reservation of the group (a member could not be annotated)."""
        with self._cond:
            group = self._groups.get(claim.key)
            if group is not None and not group.done:
                self._fail(group, why)

    def bound(self, claim: GroupClaim, uid: str, ok: bool) -> None:
        """The member's Binding was posted (``ok``) or refused (its reservation goes back). Once
        every member has answered, the group is done: its pods are bound or back in the queue."""
        with self._cond:
            group = self._groups.get(claim.key)
            if group is None:
                return
            for slot in group.slots:
                if slot.member == uid:
                    slot.bound = True
                    if not ok:
                        self.view.unreserve(uid)
            if all(s.bound for s in group.slots):
                group.done = True
                del self._groups[group.key]
                self._completed[group.key] = self._clock()
                self._completed.move_to_end(group.key)
                while len(self._completed) > COMPLETED_KEPT:
                    self._completed.popitem(last=False)

    # ------------------------------------------------------------------ expiry
    def sweep(self) -> None:
        """Release the groups whose members stopped coming (see :meth:`_sweep`)."""
        with self._cond:
            self._sweep()

    def _sweep(self) -> None:
        """Release groups whose deadline passed with nobody waiting in bind (their members never
        came to bind: deleted, or placed elsewhere by kube-scheduler's own filters)."""
        now = self._clock()
        for group in list(self._groups.values()):
            if (
                group.failed is None
                and now > group.deadline
                and not any(s.waiting for s in group.slots)
            ):
                self._fail(group, GangMembersLate(group.key))

    def _fail(self, group: Group, why: GangRefusal) -> None:
        group.failed = why
        for slot in group.slots:
            self.view.unreserve(slot.key)
        if self._groups.get(group.key) is group:
            del self._groups[group.key]
        log.info("%s", render(why))
        self._cond.notify_all()

    def held(self) -> dict[str, list[Slot]]:
        """Group key -> its slots (copies), for tests and metrics."""
        with self._cond:
            return {k: [replace(s) for s in g.slots] for k, g in self._groups.items()}


def _mismatch(
    group: Group, size: int, demand: PodDemand
) -> GangSizeMismatch | GangOtherDevices | None:
    if size != group.size:
        return GangSizeMismatch(group.key, size, group.size)
    if tuple(d.request for d in demand.demands) != group.template:
        return GangOtherDevices(group.key)
    return None
