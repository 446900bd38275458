"""Checkpoint-aware preemption: the planner prefers victims that lose least and keeps min-run."""

from __future__ import annotations

from dataclasses import dataclass, field

from xpupool.engine.cycle import Admission, Place, Preempt, QueueSpec, Wait
from xpupool.engine.cycle.cycle import SchedulingCycle
from xpupool.engine.cycle.stop_cost import StopCost, cards_of, describe, lost_card_s, stop_cost
from xpupool.engine.cycle.work import RunningWork, Stopping
from xpupool.model import Allocation, DeviceRequest, Request

from factories import engine_for, gpu_node


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


def job(job_id: int, priority: int) -> Job:
    req = Request(f"j{job_id}", 1000, 1024, DeviceRequest(count=1), priority=priority)
    return Job(job_id, "q", priority, req)


def run(cycle: SchedulingCycle, work: Job, running: dict[int, RunningWork]) -> None:
    decision = cycle.decide(work, running)
    assert isinstance(decision, Place)
    running[work.id] = Held(work.id, work.priority, list(decision.admitted.placement.allocations))


def test_stop_cost_runs_from_the_last_checkpoint_of_this_run_else_from_the_start() -> None:
    assert stop_cost(100.0, 40.0, 90.0, None) == StopCost(10.0, True, False)
    assert stop_cost(100.0, 40.0, None, None) == StopCost(60.0, False, False)
    assert stop_cost(100.0, 40.0, 30.0, None) == StopCost(60.0, False, False)  # an earlier run's
    assert stop_cost(100.0, 40.0, 95.0, 120.0).protected
    assert not stop_cost(100.0, 40.0, 95.0, 60.0).protected
    assert stop_cost(100.0, None, None, 600.0) == StopCost(0.0)  # not started: nothing to lose


def _two_low_jobs(
    costs: dict[int, StopCost] | None, preempts_min_run: bool = False
) -> tuple[SchedulingCycle, dict[int, RunningWork]]:
    engine = engine_for(gpu_node("n0", count=1), gpu_node("n1", count=1))
    spec = QueueSpec("q", "t", (), preempts_min_run=preempts_min_run)
    lookup = None if costs is None else costs.__getitem__
    cycle = SchedulingCycle(Admission(engine, [spec]), stop_costs=lookup)
    running: dict[int, RunningWork] = {}
    run(cycle, job(1, priority=1), running)
    run(cycle, job(2, priority=1), running)
    return cycle, running


def test_the_victim_that_loses_least_is_chosen_where_todays_planner_chose_the_other() -> None:
    cycle, running = _two_low_jobs(None)
    today = cycle.decide(job(3, priority=9), running)
    assert isinstance(today, Preempt) and len(today.victims) == 1
    chosen = today.victims[0].id
    spared = 2 if chosen == 1 else 1
    # the job today's planner takes has run long since its checkpoint, the other only briefly
    costs = {chosen: StopCost(3600.0, True), spared: StopCost(60.0, True)}
    cycle, running = _two_low_jobs(costs)
    decision = cycle.decide(job(3, priority=9), running)
    assert isinstance(decision, Preempt)
    assert [v.id for v in decision.victims] == [spared]


def test_a_job_inside_its_min_run_is_spared_unless_the_queue_preempts_min_run() -> None:
    costs = {1: StopCost(30.0, protected=True), 2: StopCost(30.0, protected=True)}
    cycle, running = _two_low_jobs(costs)
    assert isinstance(cycle.decide(job(3, priority=9), running), Wait)
    costs[2] = StopCost(900.0)  # past its min-run: it may go, though it loses more
    decision = cycle.decide(job(3, priority=9), running)
    assert isinstance(decision, Preempt) and [v.id for v in decision.victims] == [2]
    cycle, running = _two_low_jobs(dict.fromkeys((1, 2), StopCost(30.0, protected=True)), True)
    assert isinstance(cycle.decide(job(3, priority=9), running), Preempt)


def test_lost_work_counts_cards_and_reads_in_card_minutes() -> None:
    _, running = _two_low_jobs(None)
    allocs = running[1].allocations
    assert cards_of(allocs[0]) == 1.0
    cost = StopCost(192.0, True)
    assert lost_card_s(cost, allocs) == 192.0
    assert describe(cost, 192.0) == "lost 3.2 card-min since its checkpoint"
    assert describe(StopCost(60.0), 60.0) == "lost 1.0 card-min of run time (no checkpoint)"
