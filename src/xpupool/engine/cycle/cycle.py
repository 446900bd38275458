"""One scheduling cycle: which pending work to try, in what order, and what to do with each.

The server's scheduling loop and the timed simulator drive this one class, so a replay answers
"what would my server do with this workload and these quotas". For each pending job in
:meth:`SchedulingCycle.order` (dominant resource fairness between tenants, then priority, then
age), :meth:`SchedulingCycle.decide` admits it against its queue's quota and places it, or says
why it waits, or names the lower-priority jobs to preempt for it. Every what-if runs inside a
transaction and leaves the state as it found it. The caller applies the decisions: the server
persists them and stops processes, the simulator moves its clock.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from xpupool.engine.cycle.admission import Admission, Admitted, Preemption, Refusal
from xpupool.engine.cycle.consolidate import Consolidation, ConsolidationMove
from xpupool.engine.cycle.defrag import Defrag
from xpupool.engine.cycle.dispatch import SiteDispatch
from xpupool.engine.cycle.elastic import ElasticBook, Shrink, shrink_plan
from xpupool.engine.cycle.eviction import may_evict, may_reclaim
from xpupool.engine.cycle.faster_cards import FasterCards, FasterMove
from xpupool.engine.cycle.preempt import Loss, plan_preemption
from xpupool.engine.cycle.recutting import RecutOffer, Recutting, recut_victims, recutting
from xpupool.engine.cycle.reservations import Reservations, Within
from xpupool.engine.cycle.stop_cost import StopCost, StopCosts, cards_of
from xpupool.engine.cycle.work import PendingWork, RunningWork, Stopping
from xpupool.engine.gang_sites import keeps_to_one_site, open_domains, within_domains
from xpupool.engine.outcomes import (
    Defragmenting,
    GangIncomplete,
    Inadmissible,
    NeverFits,
    PreemptCause,
    PreemptingLowerPriority,
    Reclaiming,
    Refused,
    WaitCause,
    WaitingForVictims,
)
from xpupool.engine.site_choice import SiteChoice
from xpupool.engine.txn import Transaction
from xpupool.engine.verdict import Verdicts
from xpupool.model.allocation import Allocation
from xpupool.model.request import Request, fields_but


@dataclass(frozen=True, slots=True)
class Place:
    """Admitted and placed: every replica has its allocation, charged to the queue's flavour."""

    admitted: Admitted


@dataclass(frozen=True, slots=True)
class Wait:
    """Stays pending for ``outcome`` (``engine/outcomes.py`` renders it); ``waiting_on`` are its
    earlier victims still stopping."""

    outcome: WaitCause
    waiting_on: frozenset[int] = frozenset()

    @property
    def inadmissible(self) -> bool:
        """No future of its queue's quotas can admit it (Kueue's inadmissible workloads): it
        stays pending, and is decided again when a quota of its cohort changes (the server then
        tries every pending job again)."""
        return isinstance(self.outcome, Inadmissible)


@dataclass(frozen=True, slots=True)
class Preempt:
    """Stays pending until ``victims`` (whole jobs, lower priority) have stopped and freed room."""

    outcome: PreemptCause
    victims: tuple[RunningWork, ...]
    # the victims' instances a re-cut destroys once they are free (``recutting.recut_victims``):
    # the front lets that re-cut take them at once, before the requeued victims take them back
    recut_freed: frozenset[str] = frozenset()

    @property
    def reclaim(self) -> bool:
        """For quota the job's queue lent (else: for priority, or moves)."""
        return isinstance(self.outcome, Reclaiming)

    @property
    def moves(self) -> bool:
        """The victims are moved to defragment (``defrag.py``): requeued, placed again at once."""
        return isinstance(self.outcome, Defragmenting)


Decision = Place | Wait | Preempt | Shrink | Recutting

# every field of a request but its name: two requests alike in these fare alike
_SHAPE = fields_but("name")


class SchedulingCycle:
    """Orders and decides pending work on one :class:`Admission` (and through it, one engine)."""

    def __init__(
        self,
        admission: Admission,
        verdicts: Verdicts | None = None,
        stop_costs: StopCosts | None = None,
        sites: SiteDispatch | None = None,
        reservations: Reservations | None = None,
        defrag: Defrag | None = None,
        faster: FasterCards | None = None,
    ) -> None:
        self.admission = admission
        self.engine = admission.engine
        self.verdicts = verdicts  # with it, a wait nothing could end says so
        # with it, victims that lose least are preferred and min-run is kept (stop_cost.py)
        self.stop_costs = stop_costs
        self.sites = sites  # with it, :meth:`dispatch` chooses a site (dispatch.py)
        self.elastic = ElasticBook()  # elastic jobs' extra replicas (elastic.py)
        # with it, reserved cards are lent, held and reclaimed by its rules (reservations.py)
        self.reservations = reservations
        # with it, a partition request that fits nowhere waits for a re-cut (recutting.py)
        self.recuts: RecutOffer | None = None
        # with it, movable work is moved so a job that fits nowhere fits (defrag.py); off: None
        self.defrag = defrag
        # with it, running jobs are moved to free faster cards (faster_cards.py); off: None
        self.faster = faster
        # with it, quiet periods free cards for the expected large shapes (consolidate.py)
        self.consolidation: Consolidation | None = None
        self._refused: dict[tuple[object, ...], Wait] | None = None
        self._refused_at = (-1, -1)

    def begin_pass(self) -> None:
        """Start a pass over the pending jobs in :meth:`order`. Until the next, a job exactly like
        one refused earlier in the pass (same queue, priority and request) is refused with the
        same reason without trying again: capacity and quota only shrink during a pass unless
        something is released or the inventory changes, which starts the record afresh, and any
        job ordered between the two has their priority, so it cannot have become a victim."""
        self._refused = {}
        self._refused_at = (self.engine.state.epoch, self.admission.released)

    def order(self, pending: Sequence[PendingWork]) -> list[int]:
        """Indices of ``pending`` in the order to try them: DRF, then priority, then position."""
        return self.admission.order([(p.request, p.queue) for p in pending])

    def dispatch(
        self,
        req: Request,
        queued: Callable[[], Mapping[str, int]],
        max_runtime_s: float | None = None,
    ) -> SiteChoice | None:
        """The sites open to a pending job's ``req`` ranked by the site choice
        (``engine/site_choice.py``), best first, before it is decided: the caller keeps the job
        to the chosen one (``within_sites``) from then on. None when there is no choice to make
        (no :attr:`sites`, fewer than two sites open that take new work, or none
        that could ever hold it or that its data reaches): it is decided as it is.
        ``queued()[site]``: the jobs of its shape already dispatched to that site and pending
        (asked only when there is a choice: a pass over a one-site pool pays nothing for it).
        Changes nothing; raises ``RequestError`` at ``data`` for a dataset the network lacks."""
        if self.sites is None:
            return None
        chooser = self.sites.chooser(self.engine)
        if not chooser.applies(req):
            return None
        return chooser.choose(req, queued(), max_runtime_s)

    def takes_work(self, site: str) -> bool:
        """Whether a job dispatched to ``site`` may stay so: some node there takes new work
        (False: every node cordoned, a drained site, or lost, an unreachable one)."""
        return self.sites is None or self.sites.chooser(self.engine).takes_work(site)

    def decide(self, job: PendingWork, running: Mapping[int, RunningWork]) -> Decision:
        """Admit and place ``job`` now, or say why not and whom to preempt for it.

        A placement is committed (the engine's state and the queue's usage hold it); the other
        decisions change nothing. Gangs are all-or-none; a request that could only be placed in
        part is given back, so a job runs whole or waits. With :attr:`reservations`, ``job``
        is decided as its reservation terms allow now (``reservations.py``)."""
        if self.reservations is not None:
            held = self.reservations.constrain(job.id, job.request)
            if not isinstance(held, Request):
                return Wait(held)
            if held is not job.request:
                job = Within(job, held)
        key: tuple[object, ...] | None = None
        if self._refused is not None and not job.waiting_on:
            stamp = (self.engine.state.epoch, self.admission.released)
            if stamp != self._refused_at:
                self._refused.clear()
                self._refused_at = stamp
            key = (job.queue, job.priority, _SHAPE(job.request))
            known = self._refused.get(key)
            if known is not None:
                return known
        decision = self._decide(job, running)
        if key is not None and self._refused is not None and isinstance(decision, Wait):
            self._refused[key] = decision
        return decision

    def _decide(self, job: PendingWork, running: Mapping[int, RunningWork]) -> Decision:
        outcome = self.admission.admit(job.request, job.queue)
        if isinstance(outcome, Admitted) and outcome.placement.ok:
            return Place(outcome)
        reason: Refused
        if isinstance(outcome, Admitted):  # some replicas placed, not all: a job runs whole
            for alloc in outcome.placement.allocations:
                self.admission.release(alloc.id)
            reason = GangIncomplete(outcome.placement.failures[0])
        else:
            reason = outcome.outcome
            if not outcome.capacity_only:  # short of quota: now, or in every future?
                never = self.admission.inadmissible(job.request, job.queue)
                if never is not None:
                    return Wait(never)
        stopping = {h.id for h in running.values() if h.stopping is Stopping.PREEMPT}
        waiting_on = frozenset(job.waiting_on & stopping)
        if waiting_on:  # its victims are still stopping: do not pick more
            return Wait(WaitingForVictims(reason, tuple(sorted(waiting_on))), waiting_on)
        # a job placed in part (its replicas each took room, the rest found none) is short of
        # room only, so a re-cut may serve its remaining replicas as it serves a gang's
        room_only = isinstance(outcome, Admitted) or outcome.capacity_only
        cut: Recutting | bool = False
        if room_only and self.recuts is not None:  # free slices re-cut: nobody stops for it
            cut = recutting(self.engine, self.recuts, job.id, job.request, reason)
            if isinstance(cut, Recutting):
                return cut
        if isinstance(outcome, Refusal) and outcome.capacity_only:
            shrink = (
                shrink_plan(self.admission, self.elastic, job, reason) if self.elastic else None
            )
            if shrink is not None:  # elastic jobs' extra replicas go before any whole job
                return shrink
            spec = self.admission.queues[job.queue]
            if spec.preemption is Preemption.LOWER_PRIORITY:
                victims = self.preemption_victims(job, running)
                freed: frozenset[str] = frozenset()
                if not victims and self.recuts is not None:  # a card of such work, re-cut
                    spared = self._inside_min_run(job, running)
                    victims, freed = recut_victims(self.engine, self.recuts, job, running, spared)
                if victims:
                    return Preempt(PreemptingLowerPriority(reason, len(victims)), victims, freed)
            borrowers = self._borrowers(job)
            if borrowers:
                victims = self.preemption_victims(job, running, borrowers)
                if victims:
                    lent = Reclaiming(reason, tuple(sorted(borrowers)), len(victims))
                    return Preempt(lent, victims)
            if self.defrag is not None:  # scattered room made whole: the moved run elsewhere
                moved = self.defrag.moves_for(self.engine, job, running, reason)
                if moved is not None:
                    return Preempt(*moved)
            miss = None if self.verdicts is None else self.verdicts.never_fits(job.request)
            if miss is not None and not cut:  # (a card a re-cut could serve later: room only)
                return Wait(NeverFits(miss.reason))
        return Wait(reason)

    def _inside_min_run(
        self,
        job: PendingWork,
        running: Mapping[int, RunningWork],
        cost_of: Mapping[int, StopCost] | None = None,
    ) -> frozenset[int]:
        """The running jobs ``job`` may not stop because they are inside their minimum run
        time (none without :attr:`stop_costs`, or when ``job``'s queue ``preempts_min_run``)."""
        costs = self.stop_costs
        if costs is None or self.admission.queues[job.queue].preempts_min_run:
            return frozenset()
        if cost_of is None:
            cost_of = {h.id: costs(h.id) for h in running.values()}
        return frozenset(i for i, c in cost_of.items() if c.protected)

    def move_to_faster(self, running: Mapping[int, RunningWork]) -> list[FasterMove]:
        """With :attr:`faster`, move the running jobs that would end enough sooner on free
        faster cards there (committed; ``faster_cards.py``); else nothing. A front calls it after
        a pass that tried every pending job, and stops and restarts each moved job."""
        if self.faster is None:
            return []
        return self.faster.moves(self.admission, running)

    def consolidate(
        self, running: Mapping[int, RunningWork], waiting: bool
    ) -> list[ConsolidationMove]:
        """With :attr:`consolidation`, when no job has waited for its quiet time (``waiting``:
        whether one waits now), move the few running jobs whose moves free cards for the
        largest shape the learned workload expects (committed; ``consolidate.py``); else
        nothing. A front calls it after a pass, and stops and restarts each moved job."""
        if self.consolidation is None:
            return []
        return self.consolidation.moves(self.admission, running, waiting)

    def _borrowers(self, job: PendingWork) -> set[str]:
        """Queues of ``job``'s cohort now borrowing, when ``job`` fits its own queue's nominal
        quota: its lender may take the room back (Kueue's reclaimWithinCohort)."""
        admission = self.admission
        spec = admission.queues[job.queue]
        if spec.cohort is None or not admission.within_nominal(job.request, job.queue):
            return set()
        return {
            q.name
            for q in admission.queues.values()
            if q.cohort == spec.cohort and q.name != spec.name and admission.borrowing(q.name)
        }

    def preemption_victims(
        self,
        job: PendingWork,
        running: Mapping[int, RunningWork],
        from_queues: set[str] | None = None,
    ) -> tuple[RunningWork, ...]:
        """Jobs to stop so that every replica of ``job`` fits, or () if that cannot work.

        Goes one replica at a time in a what-if: a replica that fits (in room earlier victims
        freed) is placed without evicting more; else the engine's minimal, deterministic plan
        for it (``preempt.py``) names victims, which are released whole, and the replica is
        placed, so the next replica sees what is left. The what-if is rolled back. A gang kept
        to one site or link domain (``gang_sites.py``) is tried so in each open to it, and the
        victims of the one where they matter least are named.

        Victims are jobs of lower priority, or with ``from_queues`` any job charged to one of
        those queues (a lender reclaiming from borrowers: lowest priority, newest first). With
        :attr:`stop_costs`, a job inside its minimum run time is spared unless ``job``'s queue
        ``preempts_min_run``, and victims that lose least are preferred (``stop_cost.py``)."""
        admission = self.admission
        holder_of = {a.id: h for h in running.values() for a in h.allocations}
        costs = self.stop_costs
        cost_of = {h.id: costs(h.id) for h in running.values()} if costs is not None else {}
        spared = self._inside_min_run(job, running, cost_of)
        loss: Loss | None = None
        if costs is not None:

            def loss(alloc: Allocation) -> float:
                return cost_of[holder_of[alloc.id].id].lost_s * cards_of(alloc)

        def evictable(alloc: Allocation) -> bool:  # the rule: eviction.py
            holder = holder_of.get(alloc.id)
            if holder is None:
                return False
            if holder.id in spared:
                return False
            leaving = bool(holder.stopping)
            if from_queues is None:
                return may_evict(
                    holder.priority, job.priority, leaving=leaving, guaranteed=alloc.guaranteed
                )
            return may_reclaim(admission.queue_of(alloc.id), from_queues, leaving=leaving)

        if not any(evictable(a) for h in running.values() for a in h.allocations):
            return ()
        one = replace(job.request, replicas=1, gang=False)
        if not keeps_to_one_site(self.engine.state, job.request):
            found = self._victims_for(one, job.request.replicas, evictable, holder_of, loss)
            return () if found is None else tuple(found.values())
        # A gang kept to one site (or link domain) frees room in one: the one whose victims
        # matter least (the lowest highest priority, then the fewest, then the lowest priority
        # sum, as ``preempt`` ranks nodes), the first in the pool's order among equals.
        best: tuple[tuple[float, ...], dict[int, RunningWork]] | None = None
        state = self.engine.state
        for domain in open_domains(state, job.request):
            found = self._victims_for(
                within_domains(state, one, (domain,)),
                job.request.replicas,
                evictable,
                holder_of,
                loss,
            )
            if found is None:
                continue
            if not found:  # it fits there as it is: nothing to preempt for it
                return ()
            priorities = [v.priority for v in found.values()]
            key: tuple[float, ...] = (max(priorities), len(priorities), sum(priorities))
            if loss is not None:
                lost = sum(loss(a) for v in found.values() for a in v.allocations)
                key = (key[0], lost, *key[1:])
            if best is None or key < best[0]:
                best = (key, found)
        return () if best is None else tuple(best[1].values())

    def _victims_for(
        self,
        one: Request,
        replicas: int,
        evictable: Callable[[Allocation], bool],
        holder_of: Mapping[int, RunningWork],
        loss: Loss | None = None,
    ) -> dict[int, RunningWork] | None:
        """The jobs to stop so that ``replicas`` copies of ``one`` fit, by job id (empty: they fit
        as it is), or None when that cannot work; see :meth:`preemption_victims`."""
        victims: dict[int, RunningWork] = {}
        state = self.engine.state
        with Transaction(state) as trial:  # rolled back on leaving
            for _ in range(replicas):
                if self.engine.place(one, txn=trial).ok:  # room already (freed by earlier victims)
                    continue
                plan = plan_preemption(self.engine.pipeline, one, evictable, loss=loss)
                if plan is None:
                    return None
                for alloc in plan.victims:
                    holder = holder_of[alloc.id]
                    if holder.stopping:
                        return None
                    victims[holder.id] = holder
                    for a in holder.allocations:  # a victim job goes as a whole
                        if a.id in state.live:
                            trial.release(a.id)
                if not self.engine.place(one, txn=trial).ok:
                    return None
        return victims
