"""The scheduling cycle: order, admit-and-place, wait with a reason, or preempt whole jobs."""

from __future__ import annotations

from dataclasses import dataclass, field

from xpupool.engine import ClusterState, Engine
from xpupool.engine.cycle import Admission, QueueSpec, Quota, Resource
from xpupool.engine.cycle.cycle import Place, Preempt, SchedulingCycle, Wait
from xpupool.engine.cycle.work import RunningWork, Stopping
from xpupool.engine.outcomes import (
    Code,
    GangIncomplete,
    NeverFits,
    NoNodeFits,
    NotAdmitted,
    PreemptingLowerPriority,
    QuotaExceeded,
    Reclaiming,
    WaitingForVictims,
    render,
)
from xpupool.engine.verdict import Verdicts
from xpupool.model import Allocation, DeviceRequest, Request
from xpupool.model.request_model import RequestModel

from factories import T4, engine_for, gpu_node


@dataclass
class Job:
    id: int
    queue: str
    priority: int
    request: Request
    waiting_on: set[int] = field(default_factory=set)


@dataclass
class Held:
    id: int
    priority: int
    allocations: list[Allocation]
    stopping: Stopping | None = None


def job(job_id: int, priority: int = 0, count: int = 1, replicas: int = 1, queue: str = "q") -> Job:
    req = Request(f"j{job_id}", 1000, 1024, DeviceRequest(count=count), replicas, priority=priority)
    return Job(job_id, queue, priority, req)


def cycle_on(*counts: int, quota: int | None = None) -> SchedulingCycle:
    engine = engine_for(*(gpu_node(f"n{i}", count=c) for i, c in enumerate(counts)))
    quotas = () if quota is None else (Quota("nvidia", Resource.DEVICES, quota),)
    return SchedulingCycle(Admission(engine, [QueueSpec("q", "t", quotas)]))


def run(cycle: SchedulingCycle, work: Job, running: dict[int, RunningWork]) -> Held:
    decision = cycle.decide(work, running)
    assert isinstance(decision, Place)
    held = Held(work.id, work.priority, list(decision.admitted.placement.allocations))
    running[work.id] = held
    return held


def test_places_then_waits_for_quota_with_the_reason() -> None:
    cycle, running = cycle_on(4, quota=2), {}
    run(cycle, job(1, count=2), running)
    decision = cycle.decide(job(2), running)
    assert isinstance(decision, Wait)
    assert decision.outcome == NotAdmitted((QuotaExceeded("nvidia", Resource.DEVICES, 2, 1, 2, 0),))
    assert render(decision.outcome) == (  # the text the server stores, one check of it
        "nvidia: devices quota: 2 used + 1 asked > 2 nominal + 0 borrowable"
    )
    assert cycle.engine.state.live.keys() == {a.id for a in running[1].allocations}


def test_a_job_that_fits_only_in_part_is_given_back_whole() -> None:
    cycle, running = cycle_on(2), {}
    before = dict(cycle.engine.state.live)
    decision = cycle.decide(job(1, count=2, replicas=2), running)  # not a gang: one replica fits
    assert isinstance(decision, Wait) and isinstance(decision.outcome, GangIncomplete)
    assert cycle.engine.state.live == before
    assert not any(cycle.admission.usage["q"].values())


def test_preempts_whole_lower_priority_jobs_and_changes_nothing_while_deciding() -> None:
    cycle, running = cycle_on(1, 1, 1), {}
    low = run(cycle, job(1, priority=1, count=1, replicas=2), running)  # on two of the nodes
    run(cycle, job(2, priority=5, count=1), running)
    live = dict(cycle.engine.state.live)
    decision = cycle.decide(job(3, priority=9, count=1, replicas=2), running)
    assert isinstance(decision, Preempt)
    assert [v.id for v in decision.victims] == [low.id]  # the whole job, not one replica
    assert isinstance(decision.outcome, PreemptingLowerPriority)
    assert decision.outcome.count == 1 and not decision.reclaim
    assert render(decision.outcome).endswith("; preempting 1 lower-priority job(s)")
    assert cycle.engine.state.live == live


def test_waits_on_victims_still_stopping_instead_of_picking_more() -> None:
    cycle, running = cycle_on(1), {}
    victim = run(cycle, job(1, priority=1), running)
    victim.stopping = Stopping.PREEMPT
    waiting = job(2, priority=9)
    waiting.waiting_on = {victim.id}
    decision = cycle.decide(waiting, running)
    assert isinstance(decision, Wait) and decision.waiting_on == {victim.id}
    assert isinstance(decision.outcome, WaitingForVictims)
    assert decision.outcome.victims == (victim.id,)
    assert render(decision.outcome).endswith("; waiting for preempted job(s) [1] to stop")


def test_a_victim_stopped_for_another_cause_is_not_waited_on() -> None:
    cycle, running = cycle_on(1), {}
    victim = run(cycle, job(1, priority=1), running)
    victim.stopping = Stopping.OTHER  # cancelled, say: not preempted again, not waited on
    waiting = job(2, priority=9)
    waiting.waiting_on = {victim.id}
    decision = cycle.decide(waiting, running)
    assert isinstance(decision, Wait) and decision.outcome.code is not Code.WAITING_FOR_VICTIMS
    assert not decision.waiting_on


def test_never_preempts_equal_or_higher_priority() -> None:
    cycle, running = cycle_on(1), {}
    run(cycle, job(1, priority=5), running)
    assert isinstance(cycle.decide(job(2, priority=5), running), Wait)


def test_order_is_fair_share_then_priority_then_position() -> None:
    engine = engine_for(gpu_node("a", count=8))
    queues = [QueueSpec("qa", "a", ()), QueueSpec("qb", "b", ())]
    cycle = SchedulingCycle(Admission(engine, queues))
    running: dict[int, RunningWork] = {}
    run(cycle, job(1, count=4, queue="qa"), running)  # tenant a now holds half the cards
    pending = [job(2, queue="qa", priority=9), job(3, queue="qb"), job(4, queue="qb", priority=1)]
    assert cycle.order(pending) == [2, 1, 0]


def lender_and_borrower() -> tuple[SchedulingCycle, dict[int, RunningWork]]:
    """One 8-card node; queues 'lend' and 'borrow' with 4 cards of nominal quota each, and the
    borrower holding all 8 with one-card jobs of priorities 1, 2, 1, 2, ... (ids 1 to 8)."""
    engine = engine_for(gpu_node("n", count=8))
    queues = [
        QueueSpec("lend", "l", (Quota("nvidia", Resource.DEVICES, 4),), cohort="c"),
        QueueSpec("borrow", "b", (Quota("nvidia", Resource.DEVICES, 4),), cohort="c"),
    ]
    cycle, running = SchedulingCycle(Admission(engine, queues)), {}
    for i in range(1, 9):
        run(cycle, job(i, priority=1 + (i + 1) % 2, queue="borrow"), running)
    return cycle, running


def test_a_lender_reclaims_lent_quota_from_the_lowest_priority_newest_borrower_jobs() -> None:
    cycle, running = lender_and_borrower()
    decision = cycle.decide(job(9, priority=0, count=2, queue="lend"), running)
    assert isinstance(decision, Preempt)
    assert decision.reclaim and isinstance(decision.outcome, Reclaiming)
    assert (decision.outcome.borrowers, decision.outcome.count) == (("borrow",), 2)
    assert sorted(v.id for v in decision.victims) == [5, 7]  # priority 1, the newest two


def test_no_reclaim_beyond_the_lenders_own_nominal_quota() -> None:
    cycle, running = lender_and_borrower()
    decision = cycle.decide(job(9, priority=0, count=5, queue="lend"), running)
    assert isinstance(decision, Wait)  # five cards would borrow in turn: it waits


# ------------------------------------------------------ gangs kept to one site (issue 42, part 3)
def sited_cycle(*cards: tuple[str, int]) -> SchedulingCycle:
    """One node of T4s per (site, cards), with verdicts: the cycle as the server runs it."""
    state = ClusterState(
        [
            gpu_node(f"{site}-0", site=site, model=T4, memory_mib=15360, count=n, group_size=0)
            for site, n in cards
        ]
    )
    admission = Admission(Engine(state, "binpack"), [QueueSpec("q", "t", ())])
    return SchedulingCycle(admission, Verdicts(state))


def spec_job(job_id: int, text: str) -> Job:
    req = RequestModel.model_validate(text).to_request()
    return Job(job_id, "q", req.priority, req)


def test_a_gang_no_site_holds_now_waits_saying_so() -> None:
    cycle, running = sited_cycle(("a", 4), ("b", 2), ("c", 8)), {}
    run(cycle, spec_job(1, "T4:2 site=c"), running)  # site c: 6 of 8 free
    decision = cycle.decide(spec_job(2, "T4 replicas=7 gang"), running)
    assert isinstance(decision, Wait) and isinstance(decision.outcome, NoNodeFits)
    note = decision.outcome.why.note  # site c could, once free: not NeverFits
    assert "gang: no single site holds 7 replicas at once (the most: c, 6)" in note


def test_a_gang_no_site_could_ever_hold_waits_as_unschedulable() -> None:
    cycle = sited_cycle(("a", 4), ("b", 2), ("c", 2))
    decision = cycle.decide(spec_job(1, "T4 replicas=7 gang"), {})
    assert isinstance(decision, Wait) and isinstance(decision.outcome, NeverFits)
    assert decision.outcome.detail.startswith("no single")


def test_preemption_for_a_gang_frees_room_in_one_site() -> None:
    """Site a has 3 of 4 cards free (one low job), site b 2 of 4 (two low jobs): the gang of 4
    fits no site as it is, though 5 cards are free. Its victims free one site, the one where
    they are fewest: the one job in site a."""
    cycle, running = sited_cycle(("a", 4), ("b", 4)), {}
    low_a = run(cycle, spec_job(1, "T4 site=a priority=1"), running)
    run(cycle, spec_job(2, "T4 site=b priority=1"), running)
    run(cycle, spec_job(3, "T4 site=b priority=1"), running)
    live = dict(cycle.engine.state.live)
    decision = cycle.decide(spec_job(4, "T4 replicas=4 gang priority=9"), running)
    assert isinstance(decision, Preempt), decision
    assert [v.id for v in decision.victims] == [low_a.id]
    assert cycle.engine.state.live == live
