"""Reservations on the timed replay, on two one-GPU nodes where every start can be worked out by
hand: a reserved card lent until its window begins, then reclaimed for the task booked into it."""

from __future__ import annotations

import numpy as np

from xpupool.engine.cycle.reservations import Reservation
from xpupool.engine.fragmentation import TargetWorkload
from xpupool.model import Device, Node
from xpupool.sim.alibaba import TraceTask, to_request
from xpupool.sim.reservation_plan import ReservationPlan, fixed_windows
from xpupool.sim.timed_replay import timed_replay

NODES = [
    Node("n0", 8000, 8192, (Device("g0", "nvidia", "T4", 15360),)),
    Node("n1", 8000, 8192, (Device("g1", "nvidia", "T4", 15360),)),
]


def job(name: str, arrive: int, run: int, qos: str = "BE") -> TraceTask:
    return TraceTask(name, 1000, 0, 1, 1000, (), arrive, arrive + run, arrive, qos)


def replay(reserved_run: int, lend: bool) -> tuple[np.ndarray, np.ndarray, int, ReservationPlan]:
    # a and b want both cards from 0 for 300 s; r is booked at 50 into [100, 200) on one card;
    # late is booked into it after it ended
    tasks = [
        job("a", 0, 300),
        job("b", 0, 300),
        job("r", 50, reserved_run, "LS"),
        job("late", 250, 10),
    ]
    window = Reservation("r", "r", to_request(tasks[2]), 100, 200)
    plan = ReservationPlan((window,), {2: "r", 3: "r"}, lend)
    workload = TargetWorkload.from_requests(to_request(t) for t in tasks)
    result = timed_replay(NODES, tasks, "bestfit", 0, workload, reservations=plan)
    return result.wait_s, result.jct_s, result.preemptions, plan


def test_a_lent_card_is_reclaimed_at_the_window_start_and_the_booked_task_starts_on_time() -> None:
    wait, jct, preemptions, plan = replay(50, lend=True)
    on_time, late = plan.start_delays_s(wait, [0, 0, 50, 250])
    assert on_time == 0.0  # r started at 100, when its window began
    assert np.isnan(late) and np.isnan(wait[3])  # booked after the window: never placed
    assert preemptions == 1  # the borrower, at 100; it may not return before 200
    assert sorted(wait[:2].tolist()) == [0.0, 200.0]
    assert jct[2] == 100.0


def test_a_card_held_idle_is_lent_to_no_one() -> None:
    wait, _, preemptions, plan = replay(50, lend=False)
    assert plan.start_delays_s(wait, [0, 0, 50, 250])[0] == 0.0
    assert preemptions == 0
    assert sorted(wait[:2].tolist()) == [0.0, 200.0]  # the second waits for the window's end


def test_a_booked_task_still_running_at_the_window_end_is_stopped() -> None:
    _, jct, _, _ = replay(150, lend=True)
    assert jct[2] == 150.0  # arrived at 50, stopped at 200


def test_fixed_windows_books_one_task_per_window_ahead_of_it() -> None:
    tasks = [job(f"t{i}", i * 100, 50) for i in range(11)]
    out, plan = fixed_windows(tasks, 2.0, count=2, cards=1, window_s=120)
    assert [r.start_s for r in plan.reservations] == [166, 333]
    assert [r.end_s - r.start_s for r in plan.reservations] == [120, 120]
    assert plan.members == {11: "reserved-0", 12: "reserved-1"}
    assert out[11].duration_s == 90 and out[11].creation_time == 2 * (166 - 20)
    _, sized = fixed_windows(tasks, 1.0, count=1)  # a tenth of the 1000 s arrival window
    assert [(r.start_s, r.end_s) for r in sized.reservations] == [(500, 600)]
