"""Elastic jobs on the one cycle (issue 54 part 1): admitted at their minimum, grown one replica
per pass into idle capacity (borrowed quota included; a gang's within its link domain, issue 51),
and their extra replicas shrunk for a pending job before any whole job is preempted."""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace

from xpupool.engine.cycle import Admission, QueueSpec, Quota, Resource
from xpupool.engine.cycle.cycle import Place, Preempt, SchedulingCycle, Wait
from xpupool.engine.cycle.elastic import Shrink, grow, release_extras
from xpupool.engine.cycle.work import Stopping
from xpupool.engine.outcomes import Grew, Shrank, ShrinkingElastic, render
from xpupool.model import Allocation, DeviceRequest, Request
from xpupool.model.qos import QoS

from factories import engine_for, gpu_node


@dataclass
class Job:
    """Pending, then running: the cycle's PendingWork and RunningWork, and grow's ElasticWork."""

    id: int
    queue: str
    priority: int
    request: Request
    waiting_on: set[int] = field(default_factory=set)
    allocations: list[Allocation] = field(default_factory=list)
    stopping: Stopping | None = None


def job(
    job_id: int, replicas: int = 1, top: int | None = None, priority: int = 0, queue: str = "q"
) -> Job:
    req = Request(
        f"j{job_id}", 0, 0, DeviceRequest(count=1), replicas, priority=priority, max_replicas=top
    )
    return Job(job_id, queue, priority, req)


def cycle_on(*counts: int, queues: list[QueueSpec] | None = None) -> SchedulingCycle:
    engine = engine_for(*(gpu_node(f"n{i}", count=c) for i, c in enumerate(counts)))
    return SchedulingCycle(Admission(engine, queues or [QueueSpec("q", "t", ())]))


def run(cycle: SchedulingCycle, work: Job, running: dict[int, Job]) -> Job:
    decision = cycle.decide(work, running)
    assert isinstance(decision, Place), decision
    work.allocations = list(decision.admitted.placement.allocations)
    running[work.id] = work
    return work


def grow_all(cycle: SchedulingCycle, running: dict[int, Job]) -> list[Grew]:
    out = []
    for g in grow(cycle.admission, cycle.elastic, running.values()):
        running[g.job].allocations.append(g.allocation)
        out.append(g.outcome)
    return out


def test_admitted_at_its_minimum_then_grown_one_replica_per_pass_up_to_its_maximum() -> None:
    cycle, running = cycle_on(2, 2, 2), {}
    elastic = run(cycle, job(1, replicas=2, top=4), running)
    assert len(elastic.allocations) == 2  # the minimum, placed as a gang
    assert grow_all(cycle, running) == [Grew(1, 3, 4)]
    assert render(Grew(1, 3, 4)) == "grew to 3 of 4 replicas into idle capacity"
    assert grow_all(cycle, running) == [Grew(1, 4, 4)]
    assert grow_all(cycle, running) == []  # at its maximum, though two cards are idle
    assert len(cycle.engine.state.live) == 4


def test_a_gangs_extra_replicas_stay_in_the_link_domain_of_its_minimum() -> None:
    """Zone 1 holds three cards (a0: 2, a1: 1), zone 2 two (b0): wherever the gang's minimum of
    two goes, it grows only in its own zone, and the other zone's cards stay idle; a job that
    is no gang grows into both."""
    zones = {"a0": ("zone-1", 2), "a1": ("zone-1", 1), "b0": ("zone-2", 2)}
    nodes = [replace(gpu_node(n, count=c), link_domain=z) for n, (z, c) in zones.items()]
    for gang, spread in ((True, 1), (False, 2)):
        cycle = SchedulingCycle(Admission(engine_for(*nodes), [QueueSpec("q", "t", ())]))
        running: dict[int, Job] = {}
        work = job(1, replicas=2, top=4)
        work.request = replace(work.request, gang=gang)
        run(cycle, work, running)
        while grow_all(cycle, running):
            pass
        held = {zones[a.node][0] for a in work.allocations}
        assert len(held) == spread, (gang, [a.node for a in work.allocations])


def test_the_minimum_must_fit_all_or_none() -> None:
    cycle, running = cycle_on(1), {}
    decision = cycle.decide(job(1, replicas=2, top=4), running)
    assert isinstance(decision, Wait)
    assert not cycle.engine.state.live


def test_grows_on_borrowed_quota_and_not_past_the_cohort() -> None:
    queues = [
        QueueSpec("q", "t", (Quota("nvidia", Resource.DEVICES, 1),), cohort="c"),
        QueueSpec("lender", "u", (Quota("nvidia", Resource.DEVICES, 2),), cohort="c"),
    ]
    cycle, running = cycle_on(4, queues=queues), {}
    run(cycle, job(1, replicas=1, top=4), running)
    assert grow_all(cycle, running) == [Grew(1, 2, 4)]  # beyond its nominal 1: borrowed
    assert grow_all(cycle, running) == [Grew(1, 3, 4)]
    assert grow_all(cycle, running) == []  # the cohort's 3 cards are all used; one stays idle
    assert cycle.admission.usage["q"][("nvidia", Resource.DEVICES)] == 3


def test_extra_replicas_are_shrunk_best_effort_first_and_guaranteed_last() -> None:
    # issue 54 part 5: the class decides whose extras go first, not the priority (which favours
    # the lowest): a guaranteed job of priority -1 keeps its extra while a burstable job's goes,
    # and a best-effort job of priority 5 gives its extra before a burstable one of priority 0
    for first, then, keep in (
        (QoS.GUARANTEED, QoS.BURSTABLE, 1),
        (QoS.BURSTABLE, QoS.BEST_EFFORT, 1),
    ):
        cycle, running = cycle_on(2, 2), {}
        a = job(1, replicas=1, top=2, priority=-1 if first is QoS.GUARANTEED else 0)
        b = job(2, replicas=1, top=2, priority=5 if then is QoS.BEST_EFFORT else 0)
        a.request = replace(a.request, qos=first)
        b.request = replace(b.request, qos=then)
        run(cycle, a, running)
        run(cycle, b, running)
        grow_all(cycle, running)
        assert len(cycle.engine.state.live) == 4  # every card taken, one extra each
        decision = cycle.decide(job(3, priority=9), running)
        assert isinstance(decision, Shrink), decision
        assert [owner for owner, _ in decision.extras] == [3 - keep], (first, then)


def test_extra_replicas_are_shrunk_before_any_whole_job_is_preempted() -> None:
    cycle, running = cycle_on(2, 2), {}
    low = run(cycle, job(1, priority=0), running)  # a whole job of lower priority
    elastic = run(cycle, job(2, replicas=1, top=4, priority=5), running)
    grow_all(cycle, running)
    assert len(elastic.allocations) == 2  # its minimum and one extra; one card still idle
    grow_all(cycle, running)
    assert len(elastic.allocations) == 3 and len(cycle.engine.state.live) == 4
    live = dict(cycle.engine.state.live)
    pending = job(3, replicas=2, priority=9)
    decision = cycle.decide(pending, running)
    assert isinstance(decision, Shrink), decision  # not a Preempt of job 1
    assert decision.outcome == ShrinkingElastic(decision.outcome.cause, 2, (2,))
    assert render(decision.outcome).endswith("; shrinking 2 extra replica(s) of elastic job(s) [2]")
    assert cycle.engine.state.live == live  # deciding changed nothing
    shrunk = release_extras(cycle.admission, cycle.elastic, decision, pending.id, {2: 3})
    assert shrunk == {2: Shrank(2, 1, 1, 3)}
    assert render(shrunk[2]) == "shrank to 1 replicas (at least 1): job 3 needed the room"
    gone = {a.id for _, a in decision.extras}
    assert gone <= {a.id for a in elastic.allocations[1:]}  # extras only, never its minimum
    elastic.allocations = [a for a in elastic.allocations if a.id not in gone]
    assert isinstance(cycle.decide(pending, running), Place)
    assert low.id in running and {a.id for a in low.allocations} <= cycle.engine.state.live.keys()


def test_extras_go_for_any_priority_but_the_minimum_only_by_preemption() -> None:
    cycle, running = cycle_on(2), {}
    run(cycle, job(1, replicas=1, top=2, priority=5), running)
    grow_all(cycle, running)
    lower = job(2, priority=0)  # lower than the elastic job: takes its extra all the same
    decision = cycle.decide(lower, running)
    assert isinstance(decision, Shrink) and len(decision.extras) == 1
    release_extras(cycle.admission, cycle.elastic, decision, lower.id, {1: 2})
    running[1].allocations = running[1].allocations[:1]
    run(cycle, lower, running)
    again = job(3, priority=0)  # the elastic job's minimum is left alone
    decision = cycle.decide(again, running)
    assert isinstance(decision, Wait)
    higher = job(4, priority=9)  # a higher-priority job preempts whole jobs as before
    decision = cycle.decide(higher, running)
    assert isinstance(decision, Preempt)


def test_no_shrink_when_extras_alone_cannot_make_room() -> None:
    cycle, running = cycle_on(1, 1), {}
    run(cycle, job(1, replicas=1, top=2), running)
    grow_all(cycle, running)
    decision = cycle.decide(job(2, replicas=3, priority=9), running)
    assert not isinstance(decision, Shrink)  # 3 replicas never fit 2 cards


def test_seeded_churn_keeps_every_job_within_its_range_and_the_books_exact() -> None:
    """Jobs come and go at random (seeded): after every step each running job holds between its
    minimum and maximum, the engine holds exactly the running jobs' allocations, and the queue is
    charged exactly their cards; shrinking never takes a minimum."""
    rng = random.Random(7)
    cycle, running = cycle_on(4, 4, 2), {}
    pending: list[Job] = []
    grown = shrunk = 0
    for step in range(200):
        if rng.random() < 0.5 or not running:
            low = rng.randint(1, 3)
            top = rng.choice([None, low + rng.randint(0, 4)])
            pending.append(job(step, replicas=low, top=top, priority=rng.randint(0, 2)))
        else:
            gone = running.pop(rng.choice(sorted(running)))
            for alloc in gone.allocations:
                cycle.admission.release(alloc.id)
        for work in list(pending):
            decision = cycle.decide(work, running)
            if isinstance(decision, Shrink):
                sizes = {j: len(running[j].allocations) for j, _ in decision.extras}
                release_extras(cycle.admission, cycle.elastic, decision, work.id, sizes)
                taken = {a.id for _, a in decision.extras}
                for j in sizes:
                    running[j].allocations = [
                        a for a in running[j].allocations if a.id not in taken
                    ]
                shrunk += len(taken)
                decision = cycle.decide(work, running)
            if isinstance(decision, Place):
                work.allocations = list(decision.admitted.placement.allocations)
                running[work.id] = work
                pending.remove(work)
        grown += len(grow_all(cycle, running))
        for held in running.values():
            req = held.request
            assert req.replicas <= len(held.allocations) <= (req.max_replicas or req.replicas)
        held_ids = {a.id for h in running.values() for a in h.allocations}
        assert cycle.engine.state.live.keys() == held_ids
        cards = sum(len(a.devices) for h in running.values() for a in h.allocations)
        assert cycle.admission.usage["q"][("*", Resource.DEVICES)] == cards
    assert grown > 0 and shrunk > 0  # both were exercised
