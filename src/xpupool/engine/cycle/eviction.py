"""Which running work may be evicted for a preemptor: the one rule every front applies.

The control plane's cycle (``cycle.py``, jobs) and the Kubernetes extender
(``k8s/extender/preemption.py`` and its ``preempt`` verb, pods) both choose victims with the
engine's planner (``preempt.py``), which takes a predicate saying which allocations it may free.
That predicate is built here, so the two fronts cannot drift apart on who may be evicted:

* a holder (a job, a pod) is evicted whole or not at all: freeing one of its allocations frees
  every one of them;
* a holder already on its way out (a job being stopped, a pod being evicted, whose charge the
  engine no longer holds) is not chosen again: its room is already counted as coming free;
* for priority preemption, only a holder of strictly lower priority than the preemptor, and never
  a guaranteed one (QoS class ``guaranteed``, ``Allocation.guaranteed``; ``model/qos.py``); a pod's
  priority is its highest allocation's, so a pod holding anything of the preemptor's priority
  or above is spared;
* for reclaiming quota lent within a cohort (the control plane only; Kueue's
  ``reclaimWithinCohort``), any holder charged to one of the borrowing queues, whatever its
  priority.

Gang membership is not part of the rule. In the control plane a gang is one job, so it is
evicted whole like any job. In the extender a holder is a pod, so one pod of a pod group may be
evicted on its own, as kube-scheduler's own preemption would do; the extender does not preempt
*for* a gang member (``k8s/extender/gang.py`` places whole groups or none), which is decided
before this rule is asked.

Where the two fronts differ, it is in what they feed the rule, not in the rule: the cycle takes
a job's priority from the job, the extender a pod's from its highest allocation (every container
of a pod carries the pod's priority, so the two agree); only the cycle reclaims lent quota
(the extender has no queues).
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Mapping, Sequence
from typing import TypeVar

from xpupool.model.allocation import Allocation

K = TypeVar("K", bound=Hashable)


def may_evict(
    holder_priority: int,
    preemptor_priority: int,
    *,
    leaving: bool = False,
    guaranteed: bool = False,
) -> bool:
    """May a holder of ``holder_priority`` be evicted for a preemptor of ``preemptor_priority``?
    ``leaving``: it is already being stopped or evicted; ``guaranteed``: its QoS class is
    guaranteed, which priority never takes."""
    return not leaving and not guaranteed and holder_priority < preemptor_priority


def may_move(holder_priority: int, pending_priority: int, *, leaving: bool = False) -> bool:
    """May a holder of ``holder_priority`` be moved (checkpointed, stopped and requeued,
    ``defrag.py``) so that pending work of ``pending_priority`` fits? Only work of that priority
    or below: a move delays the moved job, which must not matter more than the one it helps."""
    return not leaving and holder_priority <= pending_priority


def may_reclaim(queue: str | None, borrowers: Collection[str], *, leaving: bool = False) -> bool:
    """May a holder charged to ``queue`` be evicted for a lender taking back what ``borrowers``
    borrowed? Priority does not enter: the lent quota was never the borrower's to keep."""
    return not leaving and queue is not None and queue in borrowers


def evictable_owners(
    charges: Mapping[K, Sequence[Allocation]], priority: int, node: str | None = None
) -> dict[int, K]:
    """Allocation id -> holder, for the holders of ``charges`` (those the engine still holds, so
    none already leaving) that :func:`may_evict` allows for a preemptor of ``priority``: every
    allocation of such a holder, since evicting it frees them all. With ``node``, only holders
    that hold something there."""
    owner: dict[int, K] = {}
    for holder, allocs in charges.items():
        guaranteed = any(a.guaranteed for a in allocs)
        if not allocs or not may_evict(
            max(a.priority for a in allocs), priority, guaranteed=guaranteed
        ):
            continue
        if node is None or any(a.node == node for a in allocs):
            owner.update((a.id, holder) for a in allocs)
    return owner
