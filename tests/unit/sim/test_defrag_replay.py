"""Online defragmentation in the timed replay, on two four-card nodes where every figure is worked
out by hand: a four-card task that fits nowhere has the task losing least moved (checkpointed,
stopped, requeued and placed again at once), within the budget (``engine/cycle/defrag.py``)."""

from __future__ import annotations

import numpy as np

from xpupool.engine.cycle.defrag import DisruptionBudget
from xpupool.engine.fragmentation import TargetWorkload
from xpupool.model import Device, Node
from xpupool.sim.alibaba import TraceTask, to_request
from xpupool.sim.checkpoints import CheckpointModel
from xpupool.sim.timed_replay import QueueOrder, TimedResult, timed_replay

NODES = [
    Node(n, 8000, 8192, tuple(Device(f"{n}-g{i}", "nvidia", "T4", 15360) for i in range(4)))
    for n in ("a", "b")
]
EVERY_30_S = CheckpointModel(0, never_share=0.0, min_interval_min=0.5, max_interval_min=0.5)


def task(
    name: str, arrive: int, run: int, cards: int, milli: int = 1000, qos: str = "BE"
) -> TraceTask:
    return TraceTask(name, 1000, 0, cards, milli, (), arrive, arrive + run, arrive, qos)


# x1 and x2 fill one node, y1 and y2 the other; x1 and y2 leave at 50, so at 70 the four-card
# task finds two cards free on each node. y1 (2 cards, 69 s run, checkpointed at 60) loses 18
# card-seconds if moved, x2 (70 s run) 20: y1 moves, big takes its node, y1 takes x1's cards.
TASKS = [
    task("x1", 0, 50, 2),
    task("x2", 0, 1000, 2),
    task("y1", 1, 1000, 2),
    task("y2", 1, 49, 2),
    task("big", 70, 100, 4),
]


def replay(budget: DisruptionBudget | None) -> TimedResult:
    workload = TargetWorkload.from_requests(to_request(t) for t in TASKS)
    return timed_replay(NODES, TASKS, "bestfit", 0, workload, checkpoints=EVERY_30_S, defrag=budget)


def test_without_defragmentation_the_large_task_waits_for_a_node_to_empty() -> None:
    off = replay(None)
    assert off.wait_s.tolist() == [0.0, 0.0, 0.0, 0.0, 930.0]  # x2 leaves at 1000
    assert "moves" not in off.summary()
    assert off.large_mean_wait_s() == 930.0


def test_the_task_losing_least_is_moved_and_the_large_task_starts_at_once() -> None:
    on = replay(DisruptionBudget())
    assert on.wait_s.tolist() == [0.0] * 5  # y1 is placed again in the instant it moved
    summary = on.summary()
    assert summary["moves"] == 1 and summary["preemptions"] == 0
    assert summary["gpu_hours_lost_moves"] == round(18 / 3600, 3)
    assert summary["gpu_hours_lost"] == 0  # a move is not a preemption
    assert summary["large_mean_wait_s"] == 0.0
    assert 0 < summary["lost_moves_pct_of_served"] < 1
    assert not np.isnan(on.jct_s).any()


def test_no_move_past_the_budget() -> None:
    none_left = replay(DisruptionBudget(moves_per_tenant_hour=0))
    assert none_left.summary()["moves"] == 0
    assert none_left.wait_s[-1] == 930.0
    too_dear = replay(DisruptionBudget(lost_gpu_hours_day=17 / 3600))  # under y1's 18 card-s
    assert too_dear.summary()["moves"] == 0 and too_dear.wait_s[-1] == 930.0


# Four nodes: eight half-card BE tasks fill node a two to a card (best fit packs them), LS tasks
# take 3, 3 and 2 cards of the others, so the 4-card BE task finds 1 + 1 + 2 cards free at 70. The
# LS tasks matter more than it and do not move; each half alone frees no card: only all eight
# moved (to the 4 free cards) free node a. Each loses 10 s of half a card since its checkpoint at 60.
NODES4 = [
    Node(n, 8000, 8192, tuple(Device(f"{n}-g{i}", "nvidia", "T4", 15360) for i in range(4)))
    for n in ("a", "b", "c", "d")
]
SHARES = [task(f"h{i}", 0, 1000, 1, milli=500) for i in range(8)] + [
    task("ls1", 1, 1000, 3, qos="LS"),
    task("ls2", 2, 1000, 3, qos="LS"),
    task("ls3", 3, 1000, 2, qos="LS"),
    task("big", 70, 100, 4),
]


def test_a_node_of_shares_is_emptied_for_the_large_task() -> None:
    workload = TargetWorkload.from_requests(to_request(t) for t in SHARES)

    def run(budget: DisruptionBudget | None) -> TimedResult:
        return timed_replay(
            NODES4,
            SHARES,
            "bestfit",
            0,
            workload,
            QueueOrder.PRIORITY,
            checkpoints=EVERY_30_S,
            defrag=budget,
        )

    off = run(None)
    assert off.wait_s[-1] == 930.0  # node a empties at 1000
    on = run(DisruptionBudget(moves_per_tenant_hour=8))
    summary = on.summary()
    assert summary["moves"] == 8, summary
    assert on.wait_s.tolist() == [0.0] * len(SHARES)
    assert summary["gpu_hours_lost_moves"] == round(8 * 10 * 0.5 / 3600, 3)
    assert summary["preemptions"] == 0
    assert not np.isnan(on.jct_s).any()
    assert run(DisruptionBudget(moves_per_tenant_hour=7)).summary()["moves"] == 0  # the budget
