"""Moving running jobs to faster cards as they free up (issue 55): a job placed on a slow card is
moved when its remaining work ends enough sooner on a free faster one, the work lost since its
checkpoint counted; never when the gain is small, the loss eats it, or no faster card is free."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from xpupool.engine import ClusterState, Engine
from xpupool.engine.cycle import Admission, Admitted, QueueSpec, Quota, Resource
from xpupool.engine.cycle.cycle import SchedulingCycle
from xpupool.engine.cycle.faster_cards import FasterCards, FasterRule, RunFacts
from xpupool.engine.cycle.work import Stopping
from xpupool.engine.outcomes import Code, MovedToFaster, render
from xpupool.model import Allocation, Device, DeviceRequest, Node, Request

HOUR = 3600.0
SPEEDS = (("V100", 10.0), ("P100", 5.0), ("K80", 1.0))


@dataclass
class Job:
    """A running job as the cycle sees it, with the facts its front would give."""

    id: int
    request: Request
    remaining_s: float
    lost_s: float = 0.0
    allocations: list[Allocation] = field(default_factory=list)
    stopping: Stopping | None = None
    priority: int = 0


def fleet(k80: int = 1, v100: int = 1, cards: int = 2, quotas: tuple[Quota, ...] = ()) -> Admission:
    nodes = [
        Node(
            f"{model}-{i}",
            64_000,
            256 * 1024,
            tuple(
                Device(f"{model}-{i}-g{j}", "nvidia", model, 16_384, index=j) for j in range(cards)
            ),
        )
        for model, count in (("K80", k80), ("V100", v100))
        for i in range(count)
    ]
    engine = Engine(ClusterState(nodes, seed=0), "throughput", seed=0)
    return Admission(engine, [QueueSpec("q", "t", quotas)])


def request(n: int = 1, name: str = "j", speeds: tuple[tuple[str, float], ...] = SPEEDS) -> Request:
    return Request(name, 0, 0, DeviceRequest(count=n), speeds=speeds)


def run_on(admission: Admission, job: Job, model: str, running: dict[int, Job]) -> Job:
    """Place ``job`` on cards of ``model`` (the test lays out who runs where)."""
    state = admission.engine.state
    pinned = Request(
        job.request.name,
        0,
        0,
        DeviceRequest(count=job.request.devices.count, models=(model,)),
        speeds=job.request.speeds,
    )
    placed = admission.admit(pinned, "q")
    assert isinstance(placed, Admitted) and placed.placement.ok, placed
    job.allocations = list(placed.placement.allocations)
    assert all(a.node.startswith(model) for a in job.allocations)
    assert all(a.id in state.live for a in job.allocations)
    running[job.id] = job
    return job


def mover(running: dict[int, Job], rule: FasterRule | None = None) -> FasterCards:
    def facts(i: int) -> RunFacts | None:
        job = running[i]
        return RunFacts("q", job.request, job.remaining_s, job.lost_s)

    return FasterCards(facts, rule)


def models_of(job: Job) -> set[str]:
    return {a.node.split("-")[0] for a in job.allocations}


def test_a_long_job_on_a_slow_card_moves_to_the_free_fast_one() -> None:
    admission, running = fleet(), {}
    job = run_on(admission, Job(1, request(), remaining_s=20 * HOUR), "K80", running)
    old = list(job.allocations)
    cycle = SchedulingCycle(admission, faster=mover(running))
    moves = cycle.move_to_faster(running)
    assert [m.job.id for m in moves] == [1]
    move = moves[0]
    assert move.old == tuple(old)
    assert {a.node.split("-")[0] for a in move.admitted.placement.allocations} == {"V100"}
    live = admission.engine.state.live
    assert all(a.id not in live for a in old)  # the slow card is free again
    assert all(a.id in live for a in move.admitted.placement.allocations)
    assert move.outcome == MovedToFaster("V100", 10.0, round(20 * HOUR - 2 * HOUR))
    assert move.outcome.code is Code.MOVED_TO_FASTER
    assert render(move.outcome) == (
        "moved to faster cards (V100, 10x): ends about 1080 min sooner; "
        "checkpointed, stopped and restarted there"
    )


def test_a_move_its_queue_has_no_quota_for_changes_nothing() -> None:
    """The job is admitted on its new cards before its old ones go: a queue at its quota
    refuses the move, and the job keeps its cards (the same allocations)."""
    admission, running = fleet(quotas=(Quota("nvidia", Resource.DEVICES, 1),)), {}
    job = run_on(admission, Job(1, request(), remaining_s=20 * HOUR), "K80", running)
    old = list(job.allocations)
    usage = {q: dict(u) for q, u in admission.usage.items()}
    assert SchedulingCycle(admission, faster=mover(running)).move_to_faster(running) == []
    assert set(admission.engine.state.live) == {a.id for a in old}
    assert {q: dict(u) for q, u in admission.usage.items()} == usage


def test_off_by_default_nothing_moves() -> None:
    admission, running = fleet(), {}
    job = run_on(admission, Job(1, request(), remaining_s=20 * HOUR), "K80", running)
    assert SchedulingCycle(admission).move_to_faster(running) == []
    assert models_of(job) == {"K80"}


@pytest.mark.parametrize(
    ("remaining_s", "lost_s"),
    [
        (20 * 60.0, 0.0),  # 10x faster, but 18 min gained: under the 30 min asked
        (2 * HOUR, 19 * HOUR),  # the redone work (2 h + 19 h lost) takes 2.1 h on the V100
    ],
)
def test_no_move_when_the_gain_is_small_or_the_lost_work_eats_it(
    remaining_s: float, lost_s: float
) -> None:
    admission, running = fleet(), {}
    job = run_on(admission, Job(1, request(), remaining_s, lost_s), "K80", running)
    live = set(admission.engine.state.live)
    assert SchedulingCycle(admission, faster=mover(running)).move_to_faster(running) == []
    assert set(admission.engine.state.live) == live  # nothing changed
    assert models_of(job) == {"K80"}


def test_counts_the_lost_work_at_the_new_speed() -> None:
    """5 h left and 5 h lost on a K80: 1 h on a V100, a gain of 4 h (5x over 1.5x): moved."""
    admission, running = fleet(), {}
    run_on(admission, Job(1, request(), 5 * HOUR, 5 * HOUR), "K80", running)
    moves = SchedulingCycle(admission, faster=mover(running)).move_to_faster(running)
    assert [m.outcome.gain_s for m in moves] == [round(4 * HOUR)]


def test_no_move_when_no_faster_card_is_free() -> None:
    admission, running = fleet(cards=1), {}
    run_on(admission, Job(1, request(), 20 * HOUR), "K80", running)
    run_on(admission, Job(2, request(), 20 * HOUR), "V100", running)
    assert SchedulingCycle(admission, faster=mover(running)).move_to_faster(running) == []


def test_the_job_that_gains_most_takes_the_one_fast_card() -> None:
    admission, running = fleet(k80=1, v100=1, cards=2), {}
    run_on(admission, Job(1, request(), 10 * HOUR), "V100", running)  # one V100 left
    run_on(admission, Job(2, request(name="short"), 4 * HOUR), "K80", running)
    run_on(admission, Job(3, request(name="long"), 30 * HOUR), "K80", running)
    moves = SchedulingCycle(admission, faster=mover(running)).move_to_faster(running)
    assert [m.job.id for m in moves] == [3]


def test_a_job_that_gains_too_little_from_the_fast_card_stays() -> None:
    admission, running = fleet(), {}
    flat = request(speeds=(("V100", 1.2), ("K80", 1.0)))  # 1.2x: under the 1.5x asked
    run_on(admission, Job(1, flat, 100 * HOUR), "K80", running)
    assert SchedulingCycle(admission, faster=mover(running)).move_to_faster(running) == []


def test_stopping_jobs_and_jobs_without_speeds_stay() -> None:
    admission, running = fleet(k80=1, v100=1, cards=4), {}
    run_on(admission, Job(1, request(speeds=()), 20 * HOUR), "K80", running)
    stopping = run_on(admission, Job(2, request(), 20 * HOUR), "K80", running)
    stopping.stopping = Stopping.OTHER
    assert SchedulingCycle(admission, faster=mover(running)).move_to_faster(running) == []


def test_a_multi_card_job_moves_whole_and_the_rule_caps_moves() -> None:
    admission, running = fleet(k80=2, v100=1, cards=4), {}
    run_on(admission, Job(1, request(2), 20 * HOUR), "K80", running)
    run_on(admission, Job(2, request(2), 10 * HOUR), "K80", running)
    rule = FasterRule(max_moves=1)
    moves = SchedulingCycle(admission, faster=mover(running, rule)).move_to_faster(running)
    assert [m.job.id for m in moves] == [1]
    placed = moves[0].admitted.placement.allocations
    assert sum(len(a.devices) for a in placed) == 2
    assert {a.node for a in placed} == {"V100-0"}


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"min_speedup": 1.0}, "min_speedup"),
        ({"min_gain_s": -1.0}, "min_gain_s"),
        ({"restart_s": -1.0}, "restart_s"),
        ({"max_moves": 0}, "max_moves"),
    ],
)
def test_a_rule_that_could_never_make_a_job_faster_is_refused(
    kwargs: dict[str, float], name: str
) -> None:
    with pytest.raises(ValueError, match=name):
        FasterRule(**kwargs)  # type: ignore[arg-type]
