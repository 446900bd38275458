"""Consolidation in quiet periods in the timed replay (``engine/cycle/consolidate.py``), on two
four-card nodes worked out by hand: once two tasks leave, two cards are free on each node and the
four-card shape the workload expects fits nowhere; with nothing waiting, the task losing least is
moved onto the other node, so the four-card task arriving later starts at once."""

from __future__ import annotations

import numpy as np
import pytest
from test_defrag_replay import EVERY_30_S, NODES, task

from xpupool.engine.cycle.consolidate import ConsolidationRule
from xpupool.engine.cycle.defrag import DisruptionBudget
from xpupool.engine.fragmentation import TargetWorkload
from xpupool.sim.alibaba import to_request
from xpupool.sim.timed_replay import TimedResult, timed_replay

# x1 and x2 fill node a, y1 and y2 node b; x1 and y2 leave at 50. y1 (checkpointed at 31) loses
# 2 cards x 19 s if moved at 50, x2 (checkpointed at 30) 2 x 20: y1 moves onto node a.
TASKS = [
    task("x1", 0, 50, 2),
    task("x2", 0, 1000, 2),
    task("y1", 1, 1000, 2),
    task("y2", 1, 49, 2),
    task("big", 200, 100, 4),
]


def replay(budget: DisruptionBudget | None, rule: ConsolidationRule | None) -> TimedResult:
    workload = TargetWorkload.from_requests(to_request(t) for t in TASKS)
    return timed_replay(
        NODES,
        TASKS,
        "bestfit",
        0,
        workload,
        checkpoints=EVERY_30_S,
        defrag=budget,
        consolidate=rule,
    )


def test_a_quiet_pool_frees_a_node_before_the_large_task_arrives() -> None:
    off = replay(DisruptionBudget(moves_per_tenant_hour=0), None)
    assert off.wait_s[-1] == 800.0  # x2 leaves at 1000
    assert "consolidation_moves" not in off.summary()
    on = replay(DisruptionBudget(), ConsolidationRule(quiet_s=10.0, every_s=0.0))
    summary = on.summary()
    assert on.wait_s.tolist() == [0.0] * 5
    assert summary["consolidation_moves"] == 1 and summary["moves"] == 1
    assert summary["gpu_hours_lost_moves"] == round(2 * 19 / 3600, 3)
    assert summary["preemptions"] == 0
    assert on.jct_s[2] == 1000 + 19  # y1 redoes the 19 s since its checkpoint
    assert not np.isnan(on.jct_s).any()


def test_within_the_budget_only_and_never_without_defragmentation() -> None:
    none_left = replay(
        DisruptionBudget(moves_per_tenant_hour=0), ConsolidationRule(quiet_s=10.0, every_s=0.0)
    )
    assert none_left.summary()["consolidation_moves"] == 0
    assert none_left.wait_s[-1] == 800.0
    with pytest.raises(ValueError, match="needs defrag"):
        replay(None, ConsolidationRule())
