"""Elastic tasks in the timed replay, on one four-card node where every figure is worked out by
hand: admitted at half, grown one replica per pass, shrunk for a pending task, run time
following the size (``sim/elastic_tasks.py``)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from xpupool.engine.fragmentation import TargetWorkload
from xpupool.model import Allocation, Device, Node, Request
from xpupool.sim.alibaba import TraceTask, to_request
from xpupool.sim.elastic_tasks import ElasticTasks
from xpupool.sim.timed_replay import timed_replay

NODE = Node("n", 8000, 8192, tuple(Device(f"g{i}", "nvidia", "T4", 15360) for i in range(4)))


def task(name: str, arrive: int, run: int, cards: int) -> TraceTask:
    return TraceTask(name, 1000, 0, cards, 1000, (), arrive, arrive + run, arrive, "BE")


def replay(
    tasks: list[TraceTask], share: float
) -> tuple[list[float], list[float], dict[str, float]]:
    workload = TargetWorkload.from_requests(to_request(t) for t in tasks)
    result = timed_replay([NODE], tasks, "bestfit", 0, workload, elastic=ElasticTasks(share))
    return result.wait_s.tolist(), result.jct_s.tolist(), result.summary()


def test_a_fixed_task_runs_its_recorded_time() -> None:
    waits, jcts, summary = replay([task("a", 0, 100, 4)], 0.0)
    assert (waits, jcts) == ([0.0], [100.0])
    assert (summary["grows"], summary["shrinks"]) == (0, 0)


def test_an_elastic_task_starts_at_half_and_grows_one_replica_per_pass() -> None:
    # 400 card-seconds of work: 2 then 3 replicas at 0 (placed, then grown after the pass),
    # 4 at the periodic pass at 1 (3 done): 397 left at 4 a second ends it at 101
    waits, jcts, summary = replay([task("a", 0, 100, 4)], 1.0)
    assert (waits, jcts) == ([0.0], [101.0])
    assert (summary["grows"], summary["shrinks"]) == (2, 0)


def test_extra_replicas_are_shrunk_for_a_pending_task_and_grown_back_when_it_leaves() -> None:
    # a holds all four cards from 1; b (one card, fixed) arrives at 10 and takes one of a's extra
    # replicas at once: a has done 3 + 4 x 9 = 39, runs on 3 until b leaves at 20 (69 done),
    # then on 4 again: 331 left ends it at 20 + 83 = 103
    waits, jcts, summary = replay([task("a", 0, 100, 4), task("b", 10, 10, 1)], 1.0)
    assert waits == [0.0, 0.0]
    assert jcts == [103.0, 10.0]
    assert (summary["grows"], summary["shrinks"]) == (3, 1)


class _Speeds:
    def request(self, index: int, task: TraceTask) -> Request:
        return to_request(task)

    def duration_s(self, index: int, allocations: Sequence[Allocation]) -> int:
        return 10


def test_elastic_share_is_checked_and_not_mixed_with_speeds() -> None:
    with pytest.raises(ValueError, match="share"):
        ElasticTasks(1.5)
    tasks = [task("a", 0, 10, 2)]
    workload = TargetWorkload.from_requests(to_request(t) for t in tasks)
    with pytest.raises(ValueError, match="speeds"):
        timed_replay(
            [NODE],
            tasks,
            "bestfit",
            0,
            workload,
            speeds=_Speeds(),
            elastic=ElasticTasks(1.0),
        )


def test_a_minimum_that_fits_only_in_part_shrinks_others_extras_as_a_gang() -> None:
    # x holds a card; e1 (2 cards: 1..2) holds two; e2 (4 cards: 2..4) arrives at 10 with one
    # card free: its minimum is refused whole for capacity, so e1's extra replica is released
    # for it at once (e1 then runs on one: 20 done, 180 left, ends at 190)
    tasks = [task("x", 0, 1000, 1), task("e1", 0, 100, 2), task("e2", 10, 100, 4)]
    waits, jcts, summary = replay(tasks, 1.0)
    assert waits == [0.0, 0.0, 0.0]
    assert jcts[1] == 190.0
    assert summary["shrinks"] == 1
