"""Reservations in the cycle: cards held for a window, lent before it, reclaimed at its start,
held for its own jobs inside it, and anyone's after it (``engine/cycle/reservations.py``)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from xpupool.engine.cycle import Admission, QueueSpec
from xpupool.engine.cycle.cycle import Place, SchedulingCycle, Wait
from xpupool.engine.cycle.reservations import Reservation, Reservations, Terms
from xpupool.engine.cycle.work import RunningWork, Stopping
from xpupool.engine.outcomes import (
    Code,
    PreemptedByReservation,
    ReservationAhead,
    ReservationClosed,
    render,
)
from xpupool.model import Allocation, Conflict, DeviceRequest, Request, RequestError

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


@dataclass
class Pool:
    """Two 4-card nodes, one cycle with a reservation book on a clock the test moves."""

    now: float = 0.0
    terms: dict[int, Terms] = field(default_factory=dict)
    running: dict[int, RunningWork] = field(default_factory=dict)

    def __post_init__(self) -> None:
        engine = engine_for(gpu_node("n0", count=4), gpu_node("n1", count=4))
        self.engine = engine
        self.book = Reservations(lambda: self.now, self._terms)
        self.cycle = SchedulingCycle(
            Admission(engine, [QueueSpec("q", "t", ())]), reservations=self.book
        )

    def _terms(self, job_id: int) -> Terms:
        return self.terms.get(job_id, Terms(None, "t", f"j{job_id}", False, None))

    def job(self, job_id: int, count: int, **terms: object) -> Job:
        base = {"reservation": None, "tenant": "t", "name": f"j{job_id}"}
        base.update({"preemptible": False, "max_run_s": None, **terms})
        self.terms[job_id] = Terms(**base)  # type: ignore[arg-type]
        return Job(job_id, "q", 0, Request(f"j{job_id}", 1000, 1024, DeviceRequest(count=count)))

    def add(self, reservation: Reservation) -> tuple[str, ...]:
        return self.book.add(reservation, self.engine)

    def stop(self, job_id: int) -> None:
        for alloc in self.running.pop(job_id).allocations:
            self.cycle.admission.release(alloc.id)

    def run(self, work: Job) -> Held:
        decision = self.cycle.decide(work, self.running)
        assert isinstance(decision, Place), decision
        held = Held(work.id, work.priority, list(decision.admitted.placement.allocations))
        self.running[work.id] = held
        return held


def reserve(pool: Pool, cards: int = 4, start: float = 100.0, end: float = 200.0) -> set[str]:
    shape = Request("r", 1000, 1024, DeviceRequest(count=cards))
    return set(pool.add(Reservation("r", "team", shape, start, end)))


def uuids(held: Held) -> set[str]:
    return {u for a in held.allocations for u in a.device_uuids}


def test_before_the_window_only_preemptible_work_or_work_ending_in_time_borrows() -> None:
    pool = Pool()
    cards = reserve(pool)
    assert len(cards) == 4
    pool.run(pool.job(1, 4))  # not preemptible: kept off the reserved node
    decision = pool.cycle.decide(pool.job(2, 4), pool.running)
    assert isinstance(decision, Wait)  # the other node is full, the reserved one is not lent
    borrower = pool.run(pool.job(3, 4, preemptible=True))
    assert uuids(borrower) == cards
    pool.stop(3)
    short = pool.run(pool.job(4, 4, max_run_s=100.0))  # ends by the window's start
    assert uuids(short) == cards


def test_at_the_window_start_borrowers_are_reclaimed_and_its_jobs_run_only_there() -> None:
    pool = Pool()
    cards = reserve(pool, cards=2)
    mine = pool.job(9, 2, reservation="r", tenant="team")
    ahead = pool.cycle.decide(mine, pool.running)
    assert isinstance(ahead, Wait) and ahead.outcome == ReservationAhead("r", 100.0)
    pool.run(pool.job(0, 4))  # not preemptible: on the node without reserved cards
    borrower = pool.run(pool.job(1, 4, preemptible=True))
    assert cards <= uuids(borrower)
    assert pool.book.reclaims(pool.running) == []  # the window has not begun
    pool.now = 100.0
    stops = pool.book.reclaims(pool.running)
    assert [(s[0].id, s[1]) for s in stops] == [(1, PreemptedByReservation("r"))]
    assert stops[0][1].code is Code.PREEMPTED_BY_RESERVATION
    pool.stop(1)
    assert uuids(pool.run(mine)) == cards
    beside = pool.run(pool.job(2, 2, preemptible=True))  # the two cards left, never reserved ones
    assert not uuids(beside) & cards
    assert isinstance(pool.cycle.decide(pool.job(3, 1, preemptible=True), pool.running), Wait)


def test_after_the_window_its_jobs_are_refused_or_stopped_and_its_cards_free() -> None:
    pool = Pool()
    cards = reserve(pool, cards=4)
    pool.now = 150.0
    mine = pool.run(pool.job(9, 4, reservation="r", name="team"))  # the holder as a job name
    assert uuids(mine) == cards
    pool.now = 200.0
    assert [(j.id, o) for j, o in pool.book.overruns(pool.running)] == [
        (9, ReservationClosed("r", "has ended"))
    ]
    late = pool.cycle.decide(pool.job(10, 1, reservation="r", tenant="team"), pool.running)
    assert isinstance(late, Wait) and late.outcome == ReservationClosed("r", "has ended")
    assert render(late.outcome) == "reservation r has ended: nothing runs in it now"
    pool.stop(9)
    pool.run(pool.job(11, 4))  # neither preemptible nor short: both nodes are anyone's again
    pool.run(pool.job(12, 4))


def test_a_job_of_another_tenant_cannot_enter_a_reservation() -> None:
    pool = Pool()
    reserve(pool)
    pool.now = 100.0
    decision = pool.cycle.decide(pool.job(5, 1, reservation="r", tenant="other"), pool.running)
    assert isinstance(decision, Wait)
    assert decision.outcome == ReservationClosed("r", "is held for team")
    unknown = pool.cycle.decide(pool.job(6, 1, reservation="nope"), pool.running)
    assert isinstance(unknown, Wait) and unknown.outcome == ReservationClosed("nope", "is unknown")


def test_refusals_name_the_field_and_hold_nothing() -> None:
    pool = Pool()
    shape = Request("r", 1000, 1024, DeviceRequest(count=4))
    with pytest.raises(RequestError) as order:
        Reservation("r", "team", shape, 100.0, 100.0)
    assert order.value.field == "to"
    pool.now = 50.0
    with pytest.raises(RequestError) as past:
        pool.add(Reservation("r", "team", shape, 10.0, 100.0))
    assert past.value.field == "from"
    pool.add(Reservation("a", "team", shape, 100.0, 200.0))
    pool.add(Reservation("b", "team", shape, 150.0, 250.0))  # the other node
    with pytest.raises(RequestError) as full:
        pool.add(Reservation("c", "team", shape, 160.0, 170.0))
    assert full.value.field == "cards"
    with pytest.raises(Conflict):
        pool.add(Reservation("a", "team", shape, 300.0, 400.0))
    assert sorted(r.name for r in pool.book) == ["a", "b"]
    pool.add(Reservation("d", "team", shape, 200.0, 300.0))  # after a: its cards again
    assert set(pool.book.cards("d")) == set(pool.book.cards("a"))


def test_cards_held_idle_are_lent_to_no_one() -> None:
    pool = Pool()
    pool.book.lend = False
    cards = reserve(pool, cards=4)
    first = pool.run(pool.job(1, 4, preemptible=True))
    assert not uuids(first) & cards
    decision = pool.cycle.decide(pool.job(2, 4, preemptible=True), pool.running)
    assert isinstance(decision, Wait)


def test_a_job_without_cards_is_not_touched() -> None:
    pool = Pool()
    reserve(pool)
    cpu_only = Job(7, "q", 0, Request("c", 1000, 1024))
    pool.terms[7] = Terms(None, "t", "c", False, None)
    assert pool.book.constrain(7, cpu_only.request) is cpu_only.request
    assert isinstance(pool.cycle.decide(cpu_only, pool.running), Place)
