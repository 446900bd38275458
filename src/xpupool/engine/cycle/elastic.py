"""Elastic jobs (issue 54 part 1): grow into idle capacity, give it back first when others need it.

A request with ``max_replicas`` (``replicas=2..8``) is admitted like any other: its minimum
(``replicas``) is placed all or none, within its queue's quota. What it holds beyond that are its
*extra* replicas, which this module alone hands out and takes back:

* :func:`grow`, called by a front once after each pass over the pending jobs (they had their
  chance first), gives each running elastic job below its maximum at most one more replica, in
  room its queue may take, borrowed quota included: so a job grows one replica per pass, and the
  jobs furthest below their maximum grow first; a gang's extra replicas join its minimum in its
  link domain (its site, where the site names none: ``gang_sites.py``), since they work with it;
* :func:`shrink_plan`, called by the cycle for a pending job refused for capacity alone, before
  any whole job is preempted for it, names the fewest extra replicas whose release lets every
  replica of that job fit (the engine's preemption planner, ``preempt.py``, on extras only). An
  extra replica is the cheapest victim there is: it is taken for any pending job, whatever its
  priority or its queue's preemption setting, and the minimum of a job is never taken this way
  (only whole-job preemption, by the usual rule, stops an elastic job below it). Extras go by
  their job's QoS class (``model/qos.py``), not by priority: best-effort jobs' first, then
  burstable ones', guaranteed ones' only when the others cannot make room (:data:`SHRINK_ORDER`).

Which allocations are extras is kept in an :class:`ElasticBook` on the cycle; an entry whose
allocation the engine no longer holds (the job ended, was preempted or shrunk) is dropped as it
is met, so a front only reports what it adds (:meth:`ElasticBook.add`, on a restart) and never
has to keep the book in step by hand. Every grow and shrink comes with its outcome
(``engine/outcomes.py``: :class:`Grew`, :class:`Shrank`), which the front renders as the job's
event. Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from xpupool.engine.cycle.admission import Admission, Admitted
from xpupool.engine.cycle.preempt import plan_preemption
from xpupool.engine.cycle.work import Asking, ElasticWork
from xpupool.engine.gang_sites import keeps_to_one_site, open_domains, within_domains
from xpupool.engine.outcomes import Grew, Refused, Shrank, ShrinkingElastic
from xpupool.engine.txn import Transaction
from xpupool.model.allocation import Allocation
from xpupool.model.qos import DEFAULT_QOS, QoS
from xpupool.model.request import Request

SHRINK_ORDER = (QoS.BEST_EFFORT, QoS.BURSTABLE, QoS.GUARANTEED)
"""Whose extra replicas a shrink takes first: a class is touched only when the extras of the
classes before it cannot make room."""


class ElasticBook:
    """The extra replicas of elastic jobs: allocation id -> (job id, the job's minimum)."""

    def __init__(self) -> None:
        self._extras: dict[int, tuple[int, int]] = {}
        self._qos: dict[int, QoS] = {}

    def add(self, job: int, min_replicas: int, alloc: Allocation, qos: QoS = DEFAULT_QOS) -> None:
        """Count ``alloc`` as an extra replica of ``job`` (whose minimum is ``min_replicas``
        and whose QoS class is ``qos``)."""
        self._extras[alloc.id] = (job, min_replicas)
        self._qos[alloc.id] = qos

    def qos_of(self, alloc_id: int) -> QoS:
        """The QoS class of the job an extra replica belongs to."""
        return self._qos.get(alloc_id, DEFAULT_QOS)

    def live(self, held: Mapping[int, Allocation]) -> dict[int, tuple[int, int]]:
        """The extras the engine still holds (``held``: its live allocations by id); the others
        are forgotten here."""
        gone = [a for a in self._extras if a not in held]
        for alloc_id in gone:
            del self._extras[alloc_id]
            self._qos.pop(alloc_id, None)
        return dict(self._extras)

    def __len__(self) -> int:
        return len(self._extras)


@dataclass(frozen=True, slots=True)
class Growth:
    """``job`` was given one more replica, ``allocation``, charged to its queue."""

    job: int
    allocation: Allocation
    outcome: Grew


@dataclass(frozen=True, slots=True)
class Shrink:
    """Stays pending until ``extras`` (job id, allocation) are released: the front releases them
    with :func:`release_extras`, tells each job's replicas (:class:`Shrank`), then decides the
    job again. Nothing is released by the decision itself."""

    outcome: ShrinkingElastic
    extras: tuple[tuple[int, Allocation], ...]


def extra_request(req: Request) -> Request:
    """One extra replica of the elastic ``req``: the same replica, alone (no gang, no range)."""
    return replace(req, replicas=1, gang=False, max_replicas=None)


def grow(admission: Admission, book: ElasticBook, running: Iterable[ElasticWork]) -> list[Growth]:
    """Give each running elastic job below its maximum at most one more replica, where its
    queue's quota (borrowing included) and the pool have room; the jobs with the lowest share of
    their maximum first, then the oldest (lowest id). Placed replicas are committed and counted
    as extras in ``book`` (the cycle's :attr:`elastic`); a job that does not fit is skipped.
    Deterministic for a given state."""
    jobs = [
        j
        for j in running
        if j.request.max_replicas is not None
        and not j.stopping
        and len(j.allocations) < j.request.max_replicas
    ]
    jobs.sort(key=lambda j: (len(j.allocations) / (j.request.max_replicas or 1), j.id))
    grown: list[Growth] = []
    for job in jobs:
        req, one = job.request, _extra_for(admission, job)
        outcome = None if one is None else admission.admit(one, job.queue)
        if not isinstance(outcome, Admitted) or not outcome.placement.ok:
            continue
        alloc = outcome.placement.allocations[0]
        book.add(job.id, req.replicas, alloc, req.qos)
        size = len(job.allocations) + 1
        grown.append(Growth(job.id, alloc, Grew(job.id, size, req.max_replicas or size)))
    return grown


def _extra_for(admission: Admission, job: ElasticWork) -> Request | None:
    """One extra replica of ``job``: kept to the link domain of its first replica when it is a
    gang that does not span sites (:func:`~xpupool.engine.gang_sites.within_domains`), anywhere
    its request allows otherwise; None (no growth) when that replica's node is not in the pool."""
    req = job.request
    one = extra_request(req)
    if not req.gang or req.span_sites or not job.allocations:
        return one
    state = admission.engine.state
    node = state.node_index.get(job.allocations[0].node)
    if node is None:
        return None
    return within_domains(state, one, (state.link_domains.key_of(node),))


def shrink_plan(
    admission: Admission, book: ElasticBook, job: Asking, cause: Refused
) -> Shrink | None:
    """The fewest extra replicas to release so that every replica of ``job`` fits, or None when
    there are none or releasing them all would not be enough (whole jobs must go, or nothing
    helps). A gang kept to one site or link domain (``gang_sites.py``) is tried in each open to
    it and the one needing the fewest extras is taken (the first in the pool's order among
    equals).
    A what-if: the state is left as it was."""
    state = admission.engine.state
    extras = book.live(state.live)
    if not extras:
        return None
    one = extra_request(job.request)
    domains: list[tuple[str, ...]] = [()]
    if keeps_to_one_site(state, job.request):
        domains = [(key,) for key in open_domains(state, job.request)]
    best: list[Allocation] | None = None
    for domain in domains:
        kept = within_domains(state, one, domain) if domain else one
        found = _extras_by_class(admission, kept, job, extras, book)
        if found is None:
            continue
        if not found:  # fits as it is there (admission's flavours refused it): not for us
            return None
        if best is None or len(found) < len(best):
            best = found
    if best is None:
        return None
    pairs = tuple((extras[a.id][0], a) for a in best)
    owners = tuple(sorted({j for j, _ in pairs}))
    return Shrink(ShrinkingElastic(cause, len(pairs), owners), pairs)


def _extras_by_class(
    admission: Admission,
    one: Request,
    job: Asking,
    extras: Mapping[int, tuple[int, int]],
    book: ElasticBook,
) -> list[Allocation] | None:
    """:func:`_extras_for` on best-effort jobs' extras first, then with burstable ones' too,
    then with every extra (:data:`SHRINK_ORDER`): the first that makes room."""
    tried = 0
    for upto in range(1, len(SHRINK_ORDER) + 1):
        classes = SHRINK_ORDER[:upto]
        allowed = {a: e for a, e in extras.items() if book.qos_of(a) in classes}
        if len(allowed) == tried:
            continue  # no extra of this class: the same try as the one before
        tried = len(allowed)
        found = _extras_for(admission, one, job, allowed)
        if found is not None:
            return found
    return None


def _extras_for(
    admission: Admission,
    one: Request,
    job: Asking,
    extras: Mapping[int, tuple[int, int]],
) -> list[Allocation] | None:
    """The extras to release so that ``job.request.replicas`` copies of ``one`` fit ([]: they
    fit as it is), or None when releasing extras cannot make them fit."""
    engine = admission.engine
    state = engine.state
    chosen: list[Allocation] = []

    def evictable(alloc: Allocation) -> bool:
        return alloc.id in extras

    with Transaction(state) as trial:  # rolled back on leaving
        for _ in range(job.request.replicas):
            if engine.place(one, txn=trial).ok:
                continue
            plan = plan_preemption(engine.pipeline, one, evictable)
            if plan is None:
                return None
            for alloc in plan.victims:
                trial.release(alloc.id)
                chosen.append(alloc)
            if not engine.place(one, txn=trial).ok:
                return None
    return chosen


def release_extras(
    admission: Admission, book: ElasticBook, shrink: Shrink, by: int, sizes: Mapping[int, int]
) -> dict[int, Shrank]:
    """Release ``shrink``'s extras (engine and quota) for pending job ``by``; ``sizes``: each
    shrunk job's replicas before. Returns each shrunk job's outcome, by job id."""
    extras = book.live(admission.engine.state.live)
    released: dict[int, int] = {}
    minimum: dict[int, int] = {}
    for job, alloc in shrink.extras:
        admission.release(alloc.id)
        released[job] = released.get(job, 0) + 1
        minimum[job] = extras[alloc.id][1]
    return {
        job: Shrank(job, sizes[job] - count, minimum[job], by) for job, count in released.items()
    }
