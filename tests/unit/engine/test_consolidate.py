"""Consolidation in quiet periods (issue 54 part 3): when no job has waited for a while, the few
moves of movable work that free whole cards for the large shapes the learned workload expects,
only where the fragmentation measure improves, within the disruption budget."""

from __future__ import annotations

import pytest
from test_defrag import Job, cards, start

from xpupool.engine import Engine
from xpupool.engine.cycle import Admission, QueueSpec
from xpupool.engine.cycle.consolidate import Consolidation, ConsolidationRule
from xpupool.engine.cycle.cycle import SchedulingCycle
from xpupool.engine.cycle.defrag import Defrag, DisruptionBudget, MoveFacts
from xpupool.engine.fragmentation.measure import TargetWorkload
from xpupool.engine.outcomes import render
from xpupool.engine.state import ClusterState
from xpupool.engine.txn import Transaction
from xpupool.model import Request

from factories import gpu_node


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def scattered(
    budget: DisruptionBudget | None = None,
) -> tuple[SchedulingCycle, dict[int, Job], Clock]:
    """Two 4-card nodes, 3 cards used on n0 and 1 on n1: a 4-card job, the large shape the
    workload expects, fits nowhere; moving job 3 onto n0 frees n1 whole."""
    workload = TargetWorkload((cards(4), cards(1)), (0.5, 0.5))
    nodes = [gpu_node(f"n{i}", count=4) for i in range(2)]
    engine = Engine(ClusterState(nodes, seed=0), "binpack", seed=0, workload=workload)
    running: dict[int, Job] = {}
    start(engine, running, Job(1, 0, cards(2)), 0)
    start(engine, running, Job(2, 0, cards(1)), 0)
    start(engine, running, Job(3, 0, cards(1), lost_card_s=60.0), 1)
    admission = Admission(engine, [QueueSpec("q", "t", ())])
    for job in running.values():
        for alloc in job.allocations:
            admission.restore(alloc, "q", "*", in_engine=False)

    def facts(i: int) -> MoveFacts | None:
        j = running[i]
        return MoveFacts(j.tenant, j.request, j.lost_card_s) if j.movable else None

    clock = Clock()
    cycle = SchedulingCycle(admission)
    defrag = Defrag(facts, clock, budget)
    cycle.consolidation = Consolidation(defrag, ConsolidationRule(quiet_s=300.0))
    return cycle, running, clock


def fits(engine: Engine, req: Request) -> bool:
    with Transaction(engine.state) as trial:
        return engine.place(req, txn=trial).ok


def test_a_quiet_pool_moves_the_one_job_that_frees_a_node_for_the_expected_large_shape() -> None:
    cycle, running, clock = scattered()
    assert cycle.consolidate(running, waiting=True) == []  # a job waits: not quiet
    clock.now = 299.0
    assert cycle.consolidate(running, waiting=False) == []  # not quiet for long enough
    clock.now = 300.0
    moves = cycle.consolidate(running, waiting=False)
    assert [m.job.id for m in moves] == [3]
    move = moves[0]
    assert {a.node for a in move.old} == {"n1"}
    assert {a.node for a in move.admitted.placement.allocations} == {"n0"}  # committed
    assert fits(cycle.engine, cards(4))  # n1 whole again
    assert render(move.outcome) == (
        "consolidating: freeing node n1 for 4-card jobs; checkpointed, stopped and restarted "
        "on a node already in use"
    )
    assert move.lost_card_s == 60.0
    assert cycle.consolidation is not None
    assert cycle.consolidation.defrag.ledger.allowance(300.0).lost_card_s_left < 8 * 3600
    running[3].allocations = list(move.admitted.placement.allocations)
    clock.now = 400.0
    assert cycle.consolidate(running, waiting=False) == []  # the large shape fits: nothing


def test_nothing_moves_past_the_budget_or_off() -> None:
    cycle, running, clock = scattered(DisruptionBudget(moves_per_tenant_hour=0))
    clock.now = 1000.0
    assert cycle.consolidate(running, waiting=False) == []
    assert not fits(cycle.engine, cards(4))
    cycle, running, clock = scattered()
    for job in running.values():
        job.movable = False  # none checkpoints
    clock.now = 1000.0
    assert cycle.consolidate(running, waiting=False) == []
    for job in running.values():
        job.movable = True
    clock.now = 1059.0  # one search a minute: the last found nothing
    assert cycle.consolidate(running, waiting=False) == []
    consolidation = cycle.consolidation
    cycle.consolidation = None
    clock.now = 1060.0
    assert cycle.consolidate(running, waiting=False) == []  # off
    cycle.consolidation = consolidation
    assert [m.job.id for m in cycle.consolidate(running, waiting=False)] == [3]


def test_a_plan_that_does_not_lower_the_fragmentation_measure_moves_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The planner finds the move that frees n1, but a measure that the move leaves where it was
    (the same before and after) refuses it: nothing moves and the budget is untouched."""
    import numpy as np

    from xpupool.engine.cycle import consolidate

    cycle, running, clock = scattered()
    state = cycle.engine.state
    monkeypatch.setattr(
        consolidate, "fragmentation", lambda st, table, nodes: np.ones(len(nodes), np.float64)
    )
    clock.now = 300.0
    assert cycle.consolidate(running, waiting=False) == []
    assert not fits(cycle.engine, cards(4))  # n1 still holds job 3
    assert {a.node for a in running[3].allocations} == {"n1"}
    assert cycle.consolidation is not None
    allowance = cycle.consolidation.defrag.ledger.allowance(300.0)
    assert allowance.lost_card_s_left == DisruptionBudget().lost_gpu_hours_day * 3600
    assert sorted(state.live) == sorted(a.id for j in running.values() for a in j.allocations)
    monkeypatch.undo()
    clock.now = 360.0  # the next search, a minute later, with the real measure: it moves
    assert [m.job.id for m in cycle.consolidate(running, waiting=False)] == [3]
