"""Preemption plans on hand-made clusters: minimal, deterministic, per card, and side-effect free."""

from __future__ import annotations

import numpy as np

from xpupool.engine.cycle import plan_preemption
from xpupool.model import DeviceRequest, Request

from factories import T4, engine_for, gpu_node


def job(priority: int, count: int = 1, core: int | None = None, uuid: str | None = None) -> Request:
    devices = DeviceRequest(count=count, core_permille=core, uuids=(uuid,) if uuid else ())
    return Request(f"p{priority}", 1000, 1024, devices, priority=priority)


def test_evicts_the_low_priority_whole_card() -> None:
    engine = engine_for(gpu_node("a", count=1))
    low = engine.place(job(1)).allocations[0]
    plan = plan_preemption(engine.pipeline, job(10))
    assert plan is not None and plan.node == "a"
    assert [v.id for v in plan.victims] == [low.id]


def test_fractional_victims_free_their_own_card_minimally() -> None:
    # Card 0: slices A (50 %, prio 1) and B (50 %, prio 2). Card 1: slice C (60 %, prio 1).
    engine = engine_for(gpu_node("a", count=2, group_size=0))
    a = engine.place(job(1, core=500, uuid="a-gpu0")).allocations[0]
    engine.place(job(2, core=500, uuid="a-gpu0"))
    c = engine.place(job(1, core=600, uuid="a-gpu1")).allocations[0]
    # A 50 % slice at prio 10 fits nowhere. Reprieve order B, A, C: keeping B and A still leaves
    # room once C is gone (card 1 empty); keeping C too does not. One victim: C.
    plan = plan_preemption(engine.pipeline, job(10, core=500))
    assert plan is not None
    assert [v.id for v in plan.victims] == [c.id]
    assert a.id in engine.state.live


def test_equal_or_higher_priority_is_never_evicted() -> None:
    engine = engine_for(gpu_node("a", count=1))
    engine.place(job(5))
    assert plan_preemption(engine.pipeline, job(5)) is None
    assert plan_preemption(engine.pipeline, job(4)) is None


def test_preemption_does_not_help_a_model_mismatch() -> None:
    engine = engine_for(gpu_node("t", model=T4, memory_mib=15360, count=1))
    engine.place(job(1))
    request = Request("h", 1000, 1024, DeviceRequest(count=1, models=("A100",)), priority=10)
    assert plan_preemption(engine.pipeline, request) is None


def test_prefers_the_node_with_the_least_important_victims() -> None:
    engine = engine_for(gpu_node("a", count=1), gpu_node("b", count=1))
    engine.place(job(5, uuid="a-gpu0"))
    low = engine.place(job(1, uuid="b-gpu0")).allocations[0]
    plan = plan_preemption(engine.pipeline, job(10))
    assert plan is not None and plan.node == "b"
    assert [v.id for v in plan.victims] == [low.id]


def test_prefers_fewer_victims_at_equal_priority() -> None:
    # Node a: one 2-card replica. Node b: two 1-card replicas. All priority 1.
    engine = engine_for(gpu_node("a", count=2, group_size=0), gpu_node("b", count=2, group_size=0))
    pair = Request(
        "pair", 1000, 1024, DeviceRequest(count=2, uuids=("a-gpu0", "a-gpu1")), priority=1
    )
    both = engine.place(pair).allocations[0]
    engine.place(job(1, uuid="b-gpu0"))
    engine.place(job(1, uuid="b-gpu1"))
    plan = plan_preemption(engine.pipeline, job(10, count=2))
    assert plan is not None and plan.node == "a"
    assert [v.id for v in plan.victims] == [both.id]


def test_planning_changes_nothing() -> None:
    engine = engine_for(gpu_node("a", count=2, group_size=0))
    engine.place(job(1, core=500, uuid="a-gpu0"))
    engine.place(job(1, uuid="a-gpu1"))
    before = {
        k: v.copy()
        for k, v in vars(engine.state).items()
        if isinstance(v, np.ndarray) and k != "node_version"
    }
    live = dict(engine.state.live)
    assert plan_preemption(engine.pipeline, job(10, count=2)) is not None
    assert engine.state.live == live
    for name, array in before.items():
        assert np.array_equal(getattr(engine.state, name), array), name
