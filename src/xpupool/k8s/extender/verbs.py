"""The kube-scheduler extender's four verbs, decided by the one engine the cluster view keeps.

kube-scheduler calls the extender only for pods that ask for a managed resource (``managedResources``
in its configuration). For such a pod:

- ``filter`` keeps the nodes where every container that asks for devices fits together, and says
  per node why the others fail, in the engine's words (kube-scheduler counts them per reason in the
  pod's ``FailedScheduling`` event). A node that could not hold the pod even with every lower-
  priority pod gone (wrong model, card too small, not a node of the pool) goes to
  ``FailedAndUnresolvableNodes``, so kube-scheduler does not try preemption there.
- A pod answered with one node (the engine's choice) holds that node's shares from then on, as
  kube-scheduler "assumes" a pod in its cache before its bind runs in the background: the next
  pod's filter, which may come before this one's bind, must not be answered the same cards. The
  hold goes when the pod binds (it becomes the bind's reservation), is filtered again, is deleted,
  or is not bound within ``assume_s``.
- ``prioritize`` rates the nodes that fit with the profile's scorers, 0..10.
- ``bind`` reads the pod from the apiserver (never from a filter body, which anyone reaching the
  port can write) and refuses, writing nothing, a pod that names no managed resource or a node
  the view has not listed; it places the pod's containers on the chosen node in one engine
  transaction under the view's lock (filter's hold when filter judged this same pod there) and
  records them as the pod's reservation, so no concurrent bind can take the same share, and a
  node where they do not fit now is refused; then, on a node that runs HAMi's device plugin,
  takes HAMi's node lock (``node_lock.py``: the device plugin finds the pod it allocates for
  through it; a bind to a locked node waits for the release), writes the annotations HAMi's
  device plugin reads (guarded by the pod's resourceVersion) and posts the Binding. Any failure
  gives the reservation back, releases the lock it took, strips the annotations it wrote unless
  the pod is bound after all (HAMi's scheduler, and the cluster view, charge a pod that carries
  them whether it is bound or not) and answers ``Error``: kube-scheduler puts the pod back in its
  queue. Filter and bind first drop a pod's own stale assignment (one whose stripping failed),
  as HAMi's ``Filter`` drops the pod's own charge.
- A pod of a group (the ``scheduling.x-k8s.io/pod-group`` label or ``xpupool.io/gang``) is placed
  with its whole group or not at all: ``filter`` and ``bind`` hand it to ``gang.py``, which
  reserves the group's places at its first member's filter and holds every member's bind until
  all have come (extenders have no Permit stage); a member whose group is released strips the
  annotations it wrote, as a failed bind does.
- ``preempt`` keeps, per node kube-scheduler proposes, the victims whose card shares the pod
  really needs: kube-scheduler sees only whole extended resources, the engine sees shares.
- A namespace's ResourceQuotas on HAMi's card resources (``resource_quota.py``) hold in
  ``filter`` and ``bind``: a pod whose shares would take its namespace past a limit fits nowhere,
  with the quota as the reason (no preemption: HAMi's ``ResourceQuotaNotFit``).

Wire types are ``extender_wire``; pods become engine requests in ``pod_request``; the API writes
(get, guarded patch, Binding) are behind :class:`PodApi` so the decisions stay testable.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from xpupool.catalog.images import ImageCatalog
from xpupool.engine import Engine
from xpupool.engine.cycle import minimal_victims
from xpupool.engine.outcomes import (
    ContainerDoesNotFit,
    FieldNeverFits,
    GangAnnotationFailed,
    NamespaceQuota,
    OnNode,
    render,
)
from xpupool.engine.reasons import PREEMPTION_MAY_HELP, TEXT
from xpupool.k8s.codec.node_lock import NodeLocks
from xpupool.k8s.codec.pod_request import PodDemand, names_managed_resource, pod_demand
from xpupool.k8s.extender.args import (
    demand_key,
    name_of,
    node_names,
    pod_priority,
    priorities,
    proposed_victims,
    scale,
    uid_of,
)
from xpupool.k8s.extender.gang import Gangs, GroupClaim, group_claim
from xpupool.k8s.extender.pod_images import with_image_needs
from xpupool.k8s.extender.pod_placement import (
    NOT_IN_POOL,
    engine_choice,
    fits_together,
    place_containers,
    place_on,
)
from xpupool.k8s.extender.preemption import (
    Nomination,
    Preemptions,
    lower_priority_owners,
    pod_fits_on,
)
from xpupool.k8s.extender.wire import (
    MAX_EXTENDER_PRIORITY,
    ExtenderArgs,
    ExtenderBindingArgs,
    ExtenderBindingResult,
    ExtenderFilterResult,
    ExtenderPreemptionArgs,
    ExtenderPreemptionResult,
    HostPriorityList,
    MetaPod,
    MetaVictims,
)
from xpupool.k8s.informers.cluster_view import ClusterView
from xpupool.k8s.informers.resource_quota import NamespaceQuotas
from xpupool.model.allocation import Allocation
from xpupool.model.errors import RequestError

log = logging.getLogger(__name__)

PREFIX = "xpupool: "
"""Every per-node message starts with it: kube-scheduler's event mixes ours with its own."""
ASSUME_S = 30.0
"""How long a filter's answer holds its shares waiting for the bind (kube-scheduler binds right
after its scheduling cycle; a pod another plugin turned down never comes)."""
DEMANDS_KEPT = 4096
UNASSIGN_TRIES = 3
"""Reads and guarded patches a failed bind spends on stripping what it wrote (a conflict means
the pod changed in between: read it again)."""
"""Pods whose demand a verb read, kept for the pod's next verbs (bounded: most recent first)."""
UNMANAGED = (
    "asks for no resource xpupool manages: the extender binds only pods that do (kube-scheduler "
    "sends it no other when its managedResources list them, and binds the rest itself)"
)


class BindError(Exception):
    """A bind that did not happen: the API refused a write (conflict, gone, forbidden)."""


class PodGoneError(BindError):
    """The pod to bind is not in the apiserver any more (404)."""


class PodApi(Protocol):
    """The three API calls a bind makes."""

    def get_pod(self, namespace: str, name: str) -> dict[str, Any]:
        """The Pod as the apiserver's JSON; raises PodGoneError if it is gone, BindError if it
        cannot be read."""
        ...

    def annotate_pod(
        self,
        namespace: str,
        name: str,
        resource_version: str,
        annotations: Mapping[str, str | None],
    ) -> None:
        """Merge ``annotations`` into the pod (a None value removes that key, as in a JSON merge
        patch) if it is still at ``resource_version``; raises BindError on a conflict (409) or
        any other refusal."""
        ...

    def bind_pod(self, namespace: str, name: str, uid: str, node: str) -> None:
        """Post the pod's Binding to ``node``; raises BindError when refused."""
        ...


Annotator = Callable[[str, PodDemand, Sequence[Allocation]], Mapping[str, str]]
"""What a bind writes on the pod for the allocations it made on a node (pod_assignment.py)."""


@dataclass(frozen=True, slots=True)
class _Judgement:
    """Filter's answer for a list of nodes."""

    fits: list[str]
    failed: dict[str, str]
    unresolvable: dict[str, str]


class Extender:
    """The verbs over one :class:`ClusterView`. Thread-safe: the view's lock guards the engine;
    API calls happen outside it."""

    def __init__(
        self,
        view: ClusterView,
        api: PodApi,
        annotate: Annotator,
        gangs: Gangs | None = None,
        *,
        choose: bool = True,
        preemptions: Preemptions | None = None,
        images: ImageCatalog | None = None,
        assume_s: float = ASSUME_S,
        clock: Callable[[], float] = time.monotonic,
        locks: NodeLocks | None = None,
        quotas: NamespaceQuotas | None = None,
    ) -> None:
        self.view = view
        self.quotas = quotas  # namespaces' ResourceQuotas on card resources (None: not read)
        self.locks = locks  # HAMi's node lock around each Binding (None: never taken)
        self.assume_s = assume_s
        self.clock = clock
        self._assumed: dict[str, float] = {}  # pod UID -> when its filter's hold lapses
        self.preemptions = preemptions
        self.images = images  # containers' images add software needs (pod_images.py)
        self.choose = choose  # filter answers the engine's node (else every node that fits)
        self.api = api
        self.annotate = annotate
        self.gangs = gangs
        self._demands: OrderedDict[str, PodDemand] = OrderedDict()  # "uid@resourceVersion"
        self._demands_lock = threading.Lock()

    # ------------------------------------------------------------------ filter
    def filter(self, args: ExtenderArgs) -> ExtenderFilterResult:
        names = node_names(args)
        try:
            demand = self._demand(args.pod)
        except RequestError as exc:
            return ExtenderFilterResult(Error=f"{PREFIX}{exc}")
        if not demand.managed:
            return ExtenderFilterResult(Nodes=args.nodes, NodeNames=args.node_names)
        try:
            gang = self._gang_of(args.pod)
        except RequestError as exc:
            return ExtenderFilterResult(Error=f"{PREFIX}{exc}")
        nomination: Nomination | None = None
        waiting: Nomination | None = None
        with self.view.engine_locked() as engine:
            self.view.drop_assignment(uid_of(args.pod))  # judged again: that one is dead
            if gang is not None:  # a gang member: the group's places (gang.py)
                assert self.gangs is not None
                uid = uid_of(args.pod)
                verdict = self.gangs.judge(engine, *gang, demand, uid, names)
                if verdict.refused and self._never(demand) is None:
                    for d in demand.demands:  # as a pod no node holds now (_judge)
                        engine.observe(d.request, False)
                failed = {n: PREFIX + render(why) for n, why in verdict.failed.items()}
                judged = _Judgement(verdict.fits, failed, {})
            else:
                if self.gangs is not None:
                    self.gangs.sweep()
                self._sweep_assumed(uid_of(args.pod))
                judged, nomination, waiting = self._judge_or_preempt(
                    engine, args.pod, demand, names
                )
        # The API may be ahead of the view's watch (preemption.Preemptions.confirm_gone).
        pre = self.preemptions
        if waiting is not None and pre is not None and pre.confirm_gone(waiting):
            with self.view.engine_locked() as engine:
                judged, nomination, _ = self._judge_or_preempt(engine, args.pod, demand, names)
        if nomination is not None:  # evict outside the lock: API calls
            assert self.preemptions is not None
            refused = self.preemptions.evict(nomination)
            if refused:
                judged = _Judgement([], dict.fromkeys(names, PREFIX + refused[0]), {})
        kept = set(judged.fits)
        nodes = None
        if args.nodes is not None:  # not nodeCacheCapable: the NodeList back, filtered
            items = [n for n in args.nodes.get("items") or [] if name_of(n) in kept]
            nodes = {**args.nodes, "items": items}
        return ExtenderFilterResult(
            Nodes=nodes,
            NodeNames=judged.fits if args.node_names is not None else None,
            FailedNodes=judged.failed or None,
            FailedAndUnresolvableNodes=judged.unresolvable or None,
        )

    def _judge_or_preempt(
        self, engine: Engine, pod: object, demand: PodDemand, names: Sequence[str]
    ) -> tuple[_Judgement, Nomination | None, Nomination | None]:
        """:meth:`_judge`, with preemption (``preemption.py``) when nothing fits: a pod holding
        a nomination is answered its node once its victims are gone; a pod that fits nowhere but
        would after evicting lower-priority pods starts a nomination. Returns the judgement, the
        nomination to evict for, and the nomination whose victims this view still sees leaving
        (the caller evicts, or asks the API, outside the lock)."""
        pre = self.preemptions
        uid = uid_of(pod)
        if pre is not None:
            pre.sweep()
            nom = pre.held(uid)
            if nom is not None:
                waiting = pre.waiting_for(nom)
                if not waiting and nom.node in names:
                    return _Judgement([nom.node], {}, {}), None, None
                if waiting:
                    why = (
                        f"{PREFIX}waiting for {len(waiting)} preempted pod(s) to leave "
                        f"{nom.node}: {', '.join(waiting[:5])}"
                    )
                    return _Judgement([], dict.fromkeys(names, why), {}), None, nom
                pre.drop(uid)  # its node is not among those kube-scheduler passed now
        judged = self._judge(engine, demand, names, uid)
        if pre is None or judged.fits or not judged.failed:
            return judged, None, None
        asked = engine.nodes_named(judged.failed)
        nom = pre.nominate(engine, demand, uid, pod_priority(pod), asked)
        if nom is None:
            return judged, None, None
        why = (
            f"{PREFIX}preempting {len(nom.victims)} lower-priority pod(s) on {nom.node}: "
            f"{', '.join(list(nom.victims.values())[:5])}"
        )
        return _Judgement([], dict.fromkeys(names, why), {}), nom, None

    def _judge(
        self, engine: Engine, demand: PodDemand, names: Sequence[str], uid: str = ""
    ) -> _Judgement:
        """The nodes of ``names`` that hold the pod, or, when none does, why each fails.

        With ``choose`` (the default) a pod that fits is answered with the one node the engine
        would place it on (its whole profile: scorers, post-score step, cards), as HAMi's filter
        answers: kube-scheduler's own filters already ran, so that node passes them, and
        kube-scheduler's scoring has nothing left to overrule the engine with. Reasons are
        worked out only when nothing fits: then kube-scheduler shows them and weighs
        preemption. The engine's choice for pod ``uid`` holds its shares (:meth:`_sweep_assumed`)
        unless the pod already holds some."""
        index = [engine.node_index(n) for n in names]
        at = {n: i for n, i in zip(names, index, strict=True) if i is not None}
        asked = engine.nodes_named(at)
        if self.choose and len(demand.demands) == 1:  # one placement answers a pod that fits
            keep = bool(uid) and not self.view.holds(uid)
            chosen = engine_choice(engine, demand, asked, keep=keep)
            if chosen is not None:
                node, placed = chosen
                over = self._over_quota(engine, demand, placed, uid)
                if over is not None:  # the engine's best cards: the pod's charge anywhere
                    if keep:
                        for alloc in placed:
                            engine.release(alloc.id)
                    return _Judgement([], {}, dict.fromkeys(names, PREFIX + render(over)))
                if keep:
                    self.view.reserve(uid, placed, name=_pod_name(demand))
                    self._assumed[uid] = self.clock() + self.assume_s
                return _Judgement([node], {}, {})
        fits_all = asked.copy()
        contexts = []
        for d in demand.demands:
            ctx = engine.feasible(d.request)
            contexts.append(ctx)
            fits_all &= ctx.node_fit
        fits = [n for n, i in zip(names, index, strict=True) if i is not None and fits_all[i]]
        failed: dict[str, str] = {}
        if len(demand.demands) > 1:  # each fits alone; do they fit together?
            together = []
            for name in fits:
                why = fits_together(engine, demand, at[name])
                if why is None:
                    together.append(name)
                else:
                    failed[name] = f"{PREFIX}containers together: {render(why)}"
            fits = together
        over_quota: dict[str, str] = {}
        if fits and self.quotas is not None and self.quotas.limits(demand.namespace):
            within = []
            for name in fits:
                over = self._over_quota_on(engine, demand, at[name], uid)
                if over is None:
                    within.append(name)
                else:
                    over_quota[name] = PREFIX + render(over)
            fits = within
        if fits:
            return _Judgement(fits, {}, {})
        unresolvable = {
            n: PREFIX + NOT_IN_POOL for n, i in zip(names, index, strict=True) if i is None
        }
        unresolvable.update(over_quota)
        never = self._never(demand)
        if never is not None:  # nothing in the pool could ever hold it: no preemption helps
            for name, i in zip(names, index, strict=True):
                if i is not None:
                    unresolvable[name] = PREFIX + render(never)
            return _Judgement([], {}, unresolvable)
        for d in demand.demands:  # refused for now: what the workload asks all the same
            engine.observe(d.request, False)
        for ctx in contexts:
            fails = ~ctx.node_fit & asked
            if not fails.any():
                continue
            labels, blame = engine.node_reasons(ctx)
            for name, i in zip(names, index, strict=True):
                if i is None or not fails[i] or name in failed or name in unresolvable:
                    continue
                reason, detail = labels[int(blame[i])]
                text = PREFIX + TEXT[reason].format(detail=detail)
                if reason in PREEMPTION_MAY_HELP:
                    failed[name] = text
                else:
                    unresolvable[name] = text
        return _Judgement([], failed, unresolvable)

    def _sweep_assumed(self, uid: str) -> None:
        """Inside the engine lock: give back the holds of filters whose bind did not come in
        time, and pod ``uid``'s own (it is being judged again)."""
        if not self._assumed:
            return
        now = self.clock()
        for held, until in list(self._assumed.items()):
            if held == uid or until <= now:
                del self._assumed[held]
                if self.view.unreserve(held) and held != uid:
                    log.info(
                        "pod %s was not bound within %.0f s of its filter: its hold lapsed",
                        held,
                        self.assume_s,
                    )

    def _over_quota(
        self, engine: Engine, demand: PodDemand, placed: Sequence[Allocation], uid: str
    ) -> NamespaceQuota | None:
        """Why ``placed`` (the pod's shares) would take its namespace past a ResourceQuota on
        card resources, or None. Inside the engine lock."""
        if self.quotas is None:
            return None
        holders = self.view.holders()
        return self.quotas.refusal(demand.namespace, placed, engine.device, holders, uid)

    def _over_quota_on(
        self, engine: Engine, demand: PodDemand, node: int, uid: str
    ) -> NamespaceQuota | None:
        """:meth:`_over_quota` for the pod placed on ``node`` (a what-if, undone)."""
        with engine.transaction() as txn:
            try:
                placed = place_containers(engine, demand, node, txn)
                if isinstance(placed, ContainerDoesNotFit):
                    return None  # it does not fit there: not the quota's to say
                return self._over_quota(engine, demand, placed.charge, uid)
            finally:
                txn.rollback()

    def _never(self, demand: PodDemand) -> FieldNeverFits | None:
        """Why no node of the pool could ever hold one of the pod's containers, or None: the
        view's engine host judges it with the profile's settings (its disabled filters), as the
        server does, so a pod the profile would fit is never called unresolvable."""
        verdicts = self.view.verdicts()
        for d in demand.demands:
            miss = verdicts.never_fits(d.request)
            if miss is not None:
                return FieldNeverFits(miss.field, miss.reason)
        return None

    # ------------------------------------------------------------------ prioritize
    def prioritize(self, args: ExtenderArgs) -> HostPriorityList:
        names = node_names(args)
        try:
            demand = self._demand(args.pod)
        except RequestError:
            return priorities((n, 0) for n in names)
        if not demand.managed:
            return priorities((n, 0) for n in names)
        if len(names) == 1:  # filter answered the engine's choice: nothing to rank
            return priorities((n, MAX_EXTENDER_PRIORITY) for n in names)
        with self.view.engine_locked() as engine:
            fits, score = engine.rate(demand.demands[0].request)
            index = [engine.node_index(n) for n in names]
        rated = [
            (n, float(score[i]))
            for n, i in zip(names, index, strict=True)
            if i is not None and fits[i]
        ]
        scores = scale([s for _, s in rated])
        by_name = {n: s for (n, _), s in zip(rated, scores, strict=True)}
        return priorities((n, by_name.get(n, 0)) for n in names)

    # ------------------------------------------------------------------ bind
    def bind(self, args: ExtenderBindingArgs) -> ExtenderBindingResult:
        """Bind the pod, or refuse (``Error``, nothing written) unless the pod the apiserver
        holds names a managed resource, ``args.node`` is a Node of the view, and the engine
        holds the pod's containers there now (the node passes filter's test for the pod: its
        hold when filter answered this node for this very demand, else a placement made now).
        The pod is read from the apiserver, never taken from a filter body: whoever can reach
        the port can send ``/filter`` any pod (docs/security.md)."""
        started = self.clock()
        ns, name, uid, node = args.pod_namespace, args.pod_name, args.pod_uid, args.node
        try:
            try:
                pod = self.api.get_pod(ns, name)
            except PodGoneError:
                self._drop_hold(uid)
                raise
            meta = pod.get("metadata") or {}
            if uid and meta.get("uid") != uid:
                self._drop_hold(uid)
                return ExtenderBindingResult(Error=f"{PREFIX}pod {ns}/{name} is not {uid} any more")
            if not names_managed_resource(pod):
                return ExtenderBindingResult(Error=f"{PREFIX}pod {ns}/{name} {UNMANAGED}")
            demand, as_filtered = self._demand_read(pod)
        except (BindError, RequestError) as exc:
            return ExtenderBindingResult(Error=f"{PREFIX}{exc}")
        if not self.view.knows_node(node):
            return ExtenderBindingResult(Error=f"{PREFIX}{node} is not a Node of the cluster")
        pod_uid = str(meta.get("uid") or uid)
        self.view.drop_assignment(pod_uid)  # assigned anew now: an old one is dead
        if not demand.managed:  # names a managed resource, asks for none of it: nothing to place
            try:
                self.api.bind_pod(ns, name, pod_uid, node)
            except BindError as exc:
                return ExtenderBindingResult(Error=f"{PREFIX}{exc}")
            return ExtenderBindingResult()
        try:
            gang = self._gang_of(pod)
        except RequestError as exc:
            return ExtenderBindingResult(Error=f"{PREFIX}{exc}")
        if gang is not None:
            rv = str(meta.get("resourceVersion") or "")
            return self._bind_member(ns, name, pod_uid, rv, node, demand, *gang, started=started)
        with self.view.engine_locked() as engine:
            self._assumed.pop(pod_uid, None)  # its filter's hold is the bind's now
            held = self.view.reservation(pod_uid)  # filter's hold or a preemptor's shares
            if as_filtered and held is not None and all(a.node == node for a in held):
                placed = held
            else:  # no hold there, or one made for a pod other than the apiserver's
                self._unreserve(pod_uid)
                placed_now = place_on(engine, demand, node)
                if isinstance(placed_now, OnNode):
                    return ExtenderBindingResult(Error=f"{PREFIX}{render(placed_now)}")
                over = self._over_quota(engine, demand, placed_now.charge, pod_uid)
                if over is not None:
                    for alloc in placed_now.charge:
                        engine.release(alloc.id)
                    return ExtenderBindingResult(Error=f"{PREFIX}{render(over)}")
                placed = placed_now.placed
                self.view.reserve(pod_uid, placed_now.charge, placed=placed, name=_pod_name(demand))
        annotations: Mapping[str, str] = {}
        try:
            locked = self._lock(node, ns, name, started)
            try:
                annotations = self.annotate(node, demand, placed)
                rv = str(meta.get("resourceVersion") or "")
                self.api.annotate_pod(ns, name, rv, annotations)
                self.api.bind_pod(ns, name, pod_uid, node)
            except Exception:
                if locked:
                    self._unlock(node, ns, name)
                raise
        except Exception as exc:  # any failure: the shares go back, the pod goes back to its queue
            with self.view.engine_locked():
                self._unreserve(pod_uid)
            self._unassign(ns, name, pod_uid, annotations)
            log.info("bind of %s/%s to %s failed: %s", ns, name, node, exc)
            return ExtenderBindingResult(Error=f"{PREFIX}bind to {node} failed: {exc}")
        if self.preemptions is not None:
            with self.view.engine_locked():
                self.preemptions.bound(pod_uid)
        self._forget(pod_uid)
        return ExtenderBindingResult()

    def _lock(self, node: str, ns: str, name: str, started: float) -> bool:
        """Take HAMi's node lock for the pod before its Binding (True: taken, release it on
        failure), waiting for another pod's lock within what is left of the bind's budget
        (``NodeLocks.wait_s`` from ``started``). Raises ``NodeLockBusyError`` when that runs
        out: nothing has been written, and kube-scheduler tries the pod again."""
        if self.locks is None:
            return False
        left = self.locks.wait_s - (self.clock() - started)
        return self.locks.acquire(node, ns, name, budget_s=left)

    def _unlock(self, node: str, ns: str, name: str) -> None:
        """Release the pod's lock after a failed bind: the device plugin will never allocate
        for a pod that was not bound, so no one else would."""
        assert self.locks is not None
        self.locks.release(node, ns, name)

    def _unassign(self, ns: str, name: str, pod_uid: str, written: Mapping[str, str]) -> None:
        """Strip from a pod whose bind failed the annotations that bind wrote (``written``; those
        still as it wrote them), unless the pod is bound after all (a Binding the API took though
        the call failed: they are what its device plugin serves it from). Left on an unbound pod
        they charge its cards to it, in HAMi's scheduler (``onAddPod`` charges any pod with
        ``hami.io/vgpu-node`` and its device annotations) and in a restarted extender, until the
        pod is deleted. Each try reads the pod and patches it guarded by that resourceVersion; a
        failure is logged: this view charges nothing for them meanwhile (``unreserve``), and the
        pod's next filter or bind drops them."""
        if not written:
            return
        why = ""
        for _ in range(UNASSIGN_TRIES):
            try:
                pod = self.api.get_pod(ns, name)
                meta = pod.get("metadata")
                spec = pod.get("spec")
                if not isinstance(meta, Mapping) or (pod_uid and meta.get("uid") != pod_uid):
                    return  # another pod by that name now
                if isinstance(spec, Mapping) and spec.get("nodeName"):
                    return
                held = meta.get("annotations")
                held = held if isinstance(held, Mapping) else {}
                stale = [k for k, v in written.items() if held.get(k) == v]
                if not stale:
                    return
                rv = str(meta.get("resourceVersion") or "")
                self.api.annotate_pod(ns, name, rv, dict.fromkeys(stale))
                return
            except BindError as exc:
                why = str(exc)
        log.warning("pod %s/%s keeps the assignment of a failed bind: %s", ns, name, why)

    def _drop_hold(self, pod_uid: str) -> None:
        """The pod of ``pod_uid`` is gone (deleted, or another pod by its name now): what filter
        held for it goes back now. kube-scheduler filters from its own cache, which may be behind
        a deletion the view has already seen, so that hold can outlive every event about the pod;
        left to lapse, it would refuse other pods meanwhile, and kube-scheduler does not try its
        unschedulable pods again when a hold lapses."""
        if pod_uid:
            with self.view.engine_locked():
                self._assumed.pop(pod_uid, None)
                self._unreserve(pod_uid)

    def _unreserve(self, pod_uid: str) -> None:
        """Give back what the pod holds unbound (a preemptor's nomination with it)."""
        if self.preemptions is not None:
            self.preemptions.drop(pod_uid)
        self.view.unreserve(pod_uid)

    def _bind_member(
        self,
        ns: str,
        name: str,
        pod_uid: str,
        resource_version: str,
        node: str,
        demand: PodDemand,
        claim: GroupClaim,
        size: int,
        *,
        started: float,
    ) -> ExtenderBindingResult:
        """A gang member's bind: take its place, annotate, wait for the whole group, then take
        the node's lock (with what is left of the bind's budget) and bind. The annotations come
        before the lock: HAMi's device plugin looks only at pods already bound to its node."""
        gangs = self.gangs
        assert gangs is not None
        placed = gangs.take(claim, size, demand, pod_uid, node)
        if not isinstance(placed, tuple):
            return ExtenderBindingResult(Error=f"{PREFIX}{render(placed)}")
        annotations: Mapping[str, str] = {}
        try:
            annotations = self.annotate(node, demand, placed)
            self.api.annotate_pod(ns, name, resource_version, annotations)
        except Exception as exc:  # one member cannot bind: the whole group goes back
            gangs.fail(claim, GangAnnotationFailed(claim.key, f"{ns}/{name}", str(exc)))
            self._unassign(ns, name, pod_uid, annotations)
            return ExtenderBindingResult(Error=f"{PREFIX}bind to {node} failed: {exc}")
        why = gangs.wait(claim, pod_uid)
        if why is not None:  # the group was released: this member's place with it
            self._unassign(ns, name, pod_uid, annotations)
            return ExtenderBindingResult(Error=f"{PREFIX}{render(why)}")
        locked = False
        try:
            locked = self._lock(node, ns, name, started)
            self.api.bind_pod(ns, name, pod_uid, node)
        except Exception as exc:
            if locked:
                self._unlock(node, ns, name)
            gangs.bound(claim, pod_uid, ok=False)
            self._unassign(ns, name, pod_uid, annotations)
            log.info("bind of gang member %s/%s to %s failed: %s", ns, name, node, exc)
            return ExtenderBindingResult(Error=f"{PREFIX}bind to {node} failed: {exc}")
        gangs.bound(claim, pod_uid, ok=True)
        self._forget(pod_uid)
        return ExtenderBindingResult()

    def _gang_of(self, pod: object) -> tuple[GroupClaim, int] | None:
        """The pod's group and its size when it is placed as a gang; None when it is placed
        alone (no group, or its group already bound). Raises RequestError for a bad claim."""
        if self.gangs is None:
            return None
        claim = group_claim(pod)
        if claim is None or self.gangs.completed(claim):
            return None
        return claim, self.gangs.size_of(claim)

    # ------------------------------------------------------------------ preempt
    def preempt(self, args: ExtenderPreemptionArgs) -> ExtenderPreemptionResult:
        try:
            demand = self._demand(args.pod)
        except RequestError:
            return ExtenderPreemptionResult(NodeNameToMetaVictims={})
        proposed = proposed_victims(args)
        if not demand.managed:  # not ours to judge: kube-scheduler's victims stand
            kept = {
                n: MetaVictims(Pods=[MetaPod(UID=u) for u in uids]) for n, uids in proposed.items()
            }
            return ExtenderPreemptionResult(NodeNameToMetaVictims=dict(kept))
        priority = pod_priority(args.pod)
        out: dict[str, MetaVictims | None] = {}
        charges = self.view.charges()
        with self.view.engine_locked() as engine:
            for node in proposed:
                needed = _victims_needed(engine, demand, node, priority, charges)
                if needed:  # kube-scheduler refuses a node with no victim
                    out[node] = MetaVictims(Pods=[MetaPod(UID=u) for u in needed])
        return ExtenderPreemptionResult(NodeNameToMetaVictims=out)

    # ------------------------------------------------------------------ pods' demands
    def _demand(self, pod: object) -> PodDemand:
        """The pod's demand, read once per pod (and version) and kept for the pod's next verbs.
        Raises RequestError for a pod that is not one."""
        key = demand_key(pod)
        with self._demands_lock:
            known = self._demands.get(key)
            if known is not None:
                self._demands.move_to_end(key)
                return known
        demand = self._read(pod)
        self._keep(key, demand)
        return demand

    def _demand_read(self, pod: Mapping[str, Any]) -> tuple[PodDemand, bool]:
        """The demand of ``pod`` as the apiserver holds it, read afresh, and whether filter
        judged this same demand for this version of the pod (its hold was made for it). The
        fresh reading replaces what a filter body said of that version."""
        key = demand_key(pod)
        demand = self._read(pod)
        with self._demands_lock:
            judged = self._demands.get(key)
        if judged != demand:
            self._keep(key, demand)
        return demand, judged == demand

    def _read(self, pod: object) -> PodDemand:
        read = pod_demand(pod)
        if self.images is not None:
            read = with_image_needs(read, pod, self.images)
        return _for_engine(read, pod_priority(pod))

    def _keep(self, key: str, demand: PodDemand) -> None:
        with self._demands_lock:
            self._demands[key] = demand
            self._demands.move_to_end(key)
            while len(self._demands) > DEMANDS_KEPT:
                self._demands.popitem(last=False)

    def _forget(self, pod_uid: str) -> None:
        with self._demands_lock:
            for key in [k for k in self._demands if k.startswith(pod_uid + "@")]:
                del self._demands[key]


# ---------------------------------------------------------------------- helpers
def _for_engine(demand: PodDemand, priority: int) -> PodDemand:
    """The pod's requests as the engine should judge them here: with the pod's priority (what
    preemption compares), and without host CPU and memory, which kube-scheduler's own
    NodeResourcesFit judges against every pod of the node, not only those holding devices."""
    demands = tuple(
        replace(d, request=replace(d.request, priority=priority, cpu_milli=0, memory_mib=0))
        for d in demand.demands
    )
    return replace(demand, demands=demands)


def _pod_name(demand: PodDemand) -> str:
    """``namespace/name``, as the cluster view names a pod's charge."""
    return f"{demand.namespace}/{demand.name}"


def _victims_needed(
    engine: Engine,
    demand: PodDemand,
    node: str,
    priority: int,
    charges: Mapping[str, tuple[Allocation, ...]],
) -> list[str] | None:
    """The pods on ``node`` to evict for the pod's card shares, by the engine's preemption
    planner (``minimal_victims``: lower-priority pods only, none that could be spared alone), or
    None if no eviction makes room there. kube-scheduler sees no shares, so its proposal is not
    the answer: a proposed pod holding nothing the pod needs is spared, a pod it did not propose
    is named when its shares are needed (kube-scheduler takes back any pod of the node by UID).
    A what-if: the state is left as it was."""
    i = engine.node_index(node)
    if i is None:
        return None
    applied = {uid: [a for a in allocs if engine.is_live(a.id)] for uid, allocs in charges.items()}
    owner = lower_priority_owners(applied, priority, node)
    victims = minimal_victims(
        engine,
        demand.demands[0].request,
        i,
        lambda alloc: alloc.id in owner,
        pod_fits_on(engine, demand),
    )
    if victims is None:
        return None
    return list(dict.fromkeys(owner[a.id] for a in victims))
