"""The LP packing bound on instances small enough to work out by hand."""

from __future__ import annotations

import pytest

from xpupool.sim.alibaba import TraceTask
from xpupool.sim.packing_bound import arrived_until, unallocated_lower_bound


def share(milli: int, i: int = 0) -> TraceTask:
    return TraceTask(f"s{milli}-{i}", 1000, 0, 1, milli, ())


def whole(num: int, i: int = 0) -> TraceTask:
    return TraceTask(f"w{num}-{i}", 1000, 0, num, 1000, ())


def test_complementary_shares_pack_perfectly() -> None:
    # 700 + 300 fill a GPU exactly: two of each fill two GPUs, nothing is left unallocated.
    tasks = [share(700, 0), share(700, 1), share(300, 0), share(300, 1)]
    assert unallocated_lower_bound(tasks, gpus=2) == pytest.approx(0.0)


def test_shares_that_cannot_pair_leave_a_floor() -> None:
    # Two GPUs, three 600s: at most one 600 per GPU, so one 600 (30 % of 2 GPUs) cannot be placed.
    tasks = [share(600, i) for i in range(3)]
    assert unallocated_lower_bound(tasks, gpus=2) == pytest.approx(30.0)


def test_whole_gpus_compete_with_shares() -> None:
    # One GPU, a whole-GPU task and a 500: the best packing places the whole GPU; 500 is left (50 %).
    assert unallocated_lower_bound([whole(1), share(500)], gpus=1) == pytest.approx(50.0)
    assert unallocated_lower_bound([whole(2)], gpus=3) == pytest.approx(0.0)


def test_cpu_only_tasks_do_not_count_and_nothing_is_zero() -> None:
    assert unallocated_lower_bound([TraceTask("c", 1000, 0, 0, 0, ())], gpus=4) == 0.0


def test_arrived_until_stops_before_crossing_the_limit() -> None:
    tasks = [share(500, i) for i in range(5)]
    assert len(arrived_until(tasks, 1200)) == 2
