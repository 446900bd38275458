"""Preemption for card shares, started by the extender itself.

kube-scheduler preempts only where its own filters see a shortage. The card shares it hands to
the extender (``managedResources`` with ``ignoredByScheduler: true``, as HAMi ships them) are not
among them, so for a pod short of card memory its dry run finds no victim on any node and it never
calls the ``preempt`` verb. So when ``filter`` finds no node for a pod and some node fails only
for capacity, the extender asks the engine's preemption planner (``engine/cycle/preempt.py``, the
same one the embedded control plane's cycle uses) for the node and the fewest lower-priority pods
whose shares make room, restricted to the nodes kube-scheduler's own filters passed, and then:

1. in one engine-locked step, gives the victims' shares to the preemptor: their charges leave the
   engine and the preemptor's containers are reserved on that node, so no other pod can take the
   room while the victims shut down (kube-scheduler's ``nominatedNodeName`` does the same for
   the resources it sees);
2. evicts the victims through the Eviction API (``policy/v1``, with the victim's UID as a
   precondition; PodDisruptionBudgets are honoured: a refused eviction charges that victim again
   and gives the reservation back);
3. answers ``filter`` with "waiting for N preempted pods to leave NODE" until every victim's pod is
   gone (its card memory is really free only then), and then with that node, where ``bind`` takes
   the reservation as it is. Deleting a victim wakes the pod in kube-scheduler's queue.

A nomination that does not end in a bind within :data:`NOMINATION_S` is given up: the reservation
goes back. Gang members are not preempted for (``gang.py`` places whole groups or none).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from xpupool.engine import Engine
from xpupool.engine.cycle import plan_preemption
from xpupool.engine.cycle.eviction import evictable_owners
from xpupool.engine.cycle.preempt import FitsOn
from xpupool.engine.outcomes import OnNode, render
from xpupool.engine.state import BoolArray
from xpupool.k8s.codec.pod_request import PodDemand
from xpupool.k8s.extender.pod_placement import fits_together, place_on
from xpupool.k8s.informers.cluster_view import ClusterView
from xpupool.model.allocation import Allocation

log = logging.getLogger(__name__)

NOMINATION_S = 300.0
"""How long a preemptor's reserved shares wait for its bind (victims' grace periods included)."""


class EvictionRefusedError(Exception):
    """The apiserver refused an eviction (a PodDisruptionBudget, RBAC, ...)."""


class Evictor(Protocol):
    def evict_pod(self, namespace: str, name: str, uid: str) -> None:
        """Evict the pod if it is still ``uid``; a pod already gone is not an error. Raises
        :class:`EvictionRefusedError` when the apiserver says no."""
        ...

    def pod_gone(self, namespace: str, name: str, uid: str) -> bool:
        """Has pod ``uid`` left the cluster (404, or the name holds another pod)? False when
        the API cannot say."""
        ...


@dataclass(frozen=True, slots=True)
class Nomination:
    """Pod ``pod_uid`` holds shares on ``node`` that ``victims`` (UID -> namespace/name) held."""

    pod_uid: str
    node: str
    victims: dict[str, str]
    deadline: float


def lower_priority_owners(
    charges: Mapping[str, Sequence[Allocation]], priority: int, node: str | None = None
) -> dict[int, str]:
    """Allocation id -> pod UID for the pods preemption may evict for a pod of ``priority``
    (and, with ``node``, that hold something there): the engine's rule
    (``engine/cycle/eviction.py``), which the control plane's cycle applies to jobs."""
    return evictable_owners(charges, priority, node)


def pod_fits_on(engine: Engine, demand: PodDemand) -> FitsOn | None:
    """The planner's fit check for a pod of several containers (all placed together on the
    node, as a what-if); None for one container, which the planner checks itself."""
    if len(demand.demands) < 2:
        return None
    return lambda node: fits_together(engine, demand, node) is None


class Preemptions:
    """The preemptions under way, over one :class:`ClusterView`. Every method but :meth:`evict`
    runs inside the view's :meth:`~ClusterView.engine_locked` block."""

    def __init__(
        self,
        view: ClusterView,
        evictor: Evictor,
        *,
        clock: Callable[[], float] = time.monotonic,
        nomination_s: float = NOMINATION_S,
    ) -> None:
        self.view = view
        self.evictor = evictor
        self.clock = clock
        self.nomination_s = nomination_s
        self._nominated: dict[str, Nomination] = {}

    def held(self, pod_uid: str) -> Nomination | None:
        """The pod's nomination, if it still stands (its reservation intact, not timed out);
        a nomination that does not is dropped and its reservation given back."""
        nom = self._nominated.get(pod_uid)
        if nom is None:
            return None
        if self.clock() > nom.deadline or self.view.reservation(pod_uid) is None:
            self.drop(pod_uid)
            return None
        return nom

    def waiting_for(self, nom: Nomination) -> list[str]:
        """The victims (namespace/name) whose pods have not gone yet."""
        return [name for uid, name in nom.victims.items() if self.view.evicting(uid)]

    def confirm_gone(self, nom: Nomination) -> bool:
        """Ask the API about the victims this view still sees leaving (outside the view's lock:
        API calls). kube-scheduler retries the pod as soon as its own watch sees a victim go,
        and this view's watch may not have seen it yet: without asking, that retry would be told
        to wait, and no later event would wake the pod. True when every victim is gone."""
        for uid, name in nom.victims.items():
            if self.view.evicting(uid):
                namespace, _, pod_name = name.partition("/")
                if self.evictor.pod_gone(namespace, pod_name, uid):
                    self.view.gone(uid)
        return not any(self.view.evicting(uid) for uid in nom.victims)

    def drop(self, pod_uid: str) -> None:
        """Forget the pod's nomination and give its reservation back (if it is still one)."""
        if self._nominated.pop(pod_uid, None) is not None:
            self.view.unreserve(pod_uid)

    def bound(self, pod_uid: str) -> None:
        """The pod is bound with its reservation: nothing is held for it any more."""
        self._nominated.pop(pod_uid, None)

    def sweep(self) -> None:
        """Drop nominations that timed out or whose pod is gone."""
        for uid in list(self._nominated):
            self.held(uid)

    def nominate(
        self, engine: Engine, demand: PodDemand, pod_uid: str, priority: int, nodes: BoolArray
    ) -> Nomination | None:
        """Plan a preemption for the pod over ``nodes`` and, when one helps, give it the victims'
        shares (see the module docstring); None when evicting lower-priority pods cannot help.
        The caller then calls :meth:`evict` outside the lock."""
        if not pod_uid or pod_uid in self._nominated:
            return None
        holders = {u: h for u, h in self.view.holders().items() if h[0]}  # named pods only
        owner = lower_priority_owners({u: a for u, (_, a) in holders.items()}, priority)
        if not owner:
            return None
        plan = plan_preemption(
            engine,
            demand.demands[0].request,
            lambda alloc: alloc.id in owner,
            nodes=nodes,
            fits_on=pod_fits_on(engine, demand),
        )
        if plan is None:
            return None
        victims = list(dict.fromkeys(owner[a.id] for a in plan.victims))
        self.view.evict(victims)  # whole pods go: every share each one holds
        placed = place_on(engine, demand, plan.node)
        if isinstance(placed, OnNode):  # cannot happen: whole pods free at least the planned shares
            why = render(placed)
            log.warning("preemption for pod %s on %s did not place: %s", pod_uid, plan.node, why)
            for uid in victims:
                self.view.unevict(uid)
            return None
        name = f"{demand.namespace}/{demand.name}"
        self.view.reserve(pod_uid, placed.charge, placed=placed.placed, name=name)
        nom = Nomination(
            pod_uid,
            plan.node,
            {uid: holders[uid][0] for uid in victims},
            self.clock() + self.nomination_s,
        )
        self._nominated[pod_uid] = nom
        log.info(
            "preempting %s on %s for pod %s", ", ".join(nom.victims.values()), nom.node, pod_uid
        )
        return nom

    def evict(self, nom: Nomination) -> list[str]:
        """Evict the nomination's victims (outside the view's lock: API calls); the refusals'
        texts. A refused victim is charged again and the preemptor's reservation given back."""
        refused: dict[str, str] = {}
        for uid, name in nom.victims.items():
            namespace, _, pod_name = name.partition("/")
            try:
                self.evictor.evict_pod(namespace, pod_name, uid)
            except EvictionRefusedError as exc:
                refused[uid] = f"evicting {name}: {exc}"
        if refused:
            with self.view.engine_locked():
                self.drop(nom.pod_uid)  # first: the victims' shares are in its reservation
                for uid in refused:
                    self.view.unevict(uid)
            log.info("preemption for pod %s given up: %s", nom.pod_uid, "; ".join(refused.values()))
        return list(refused.values())
