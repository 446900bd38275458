"""The per-shape answers the pipeline keeps current (devices that fit, refusals' static part) are
the answers a fresh pipeline computes from scratch, through any mix of placements, releases and
inventory changes."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xpupool.engine import ClusterState, Engine
from xpupool.engine.pipeline import Pipeline
from xpupool.engine.topology import best_group_count
from xpupool.model import DeviceRequest, Request
from xpupool.model.request import Topology
from xpupool.model.taint import parse_taint

from factories import A10, gpu_node

SHAPES = (
    DeviceRequest(count=1, core_permille=250, memory_permille=250),
    DeviceRequest(count=1, memory_mib=20_000),
    DeviceRequest(count=1),
    DeviceRequest(count=2, topology=Topology.SAME_LINK_GROUP),
    DeviceRequest(count=4),
    DeviceRequest(count=2, models=("A10",)),
    DeviceRequest(count=8),
)


def _state() -> ClusterState:
    nodes = [gpu_node(f"a{i}", count=8, group_size=4, cpu_milli=16_000) for i in range(6)]
    nodes += [
        gpu_node(f"b{i}", model=A10, count=4, memory_mib=24576, group_size=2) for i in range(4)
    ]
    return ClusterState(nodes, seed=3)


def _fresh_view(state: ClusterState, req: Request) -> tuple[bytes, bytes, object]:
    """What a pipeline with no history sees for ``req`` now."""
    fresh = Pipeline(state)
    ctx = fresh.context(req)
    fresh.filter(ctx)
    assert ctx.dev_fit is not None
    reasons = None if ctx.node_fit.any() else fresh.explain(ctx).reasons
    return ctx.node_fit.tobytes(), ctx.dev_fit.tobytes(), reasons


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, len(SHAPES) - 1), st.integers(0, 9)), max_size=60))
@pytest.mark.slow
def test_kept_answers_equal_fresh_ones(steps: list[tuple[int, int]]) -> None:
    """Each step places one shape (or releases an allocation, or cordons a card); after each,
    the engine's own pipeline, which keeps answers per shape, agrees with a fresh one on every
    shape: the fitting nodes, the fitting devices and, when nothing fits, the reasons."""
    engine = Engine(_state(), "binpack")
    state = engine.state
    for i, (shape, action) in enumerate(steps):
        if action == 9 and state.live:  # a release
            engine.release(sorted(state.live)[i % len(state.live)])
        elif action == 8:  # an inventory change: a new epoch
            uuid = state.slot_uuid[sorted(state.slot_uuid)[i % len(state.slot_uuid)]]
            state.set_device_cordoned(uuid, cordoned=i % 2 == 0)
        else:
            engine.place(Request(f"r{i}", 1000 * (1 + action), 1024, SHAPES[shape]))
        for j, devices in enumerate(SHAPES):
            req = Request(f"q{j}", 4000, 1024, devices)
            ctx = engine.pipeline.context(req)
            engine.pipeline.filter(ctx)
            assert ctx.dev_fit is not None
            reasons = None if ctx.node_fit.any() else engine.pipeline.explain(ctx).reasons
            assert (ctx.node_fit.tobytes(), ctx.dev_fit.tobytes(), reasons) == _fresh_view(
                state, req
            )
            if devices.count > 1:  # the most fitting cards in one link group, kept per node
                assert ctx.group_best is not None
                assert ctx.group_best.tolist() == best_group_count(state, ctx.dev_fit).tolist()


def test_a_refusal_after_an_inventory_change_names_the_change() -> None:
    """The static part of an explanation is kept per epoch: cordoning an idle card of a node that
    was refused for capacity makes that node's reason the cordon, not the capacity."""
    engine = Engine(ClusterState([gpu_node("a", count=8), gpu_node("b", count=8)]), "binpack")
    for name in ("a", "b"):
        one = Request(f"on-{name}", 1000, 1024, DeviceRequest(count=1, uuids=(f"{name}-gpu0",)))
        assert engine.place(one).ok
    eight = Request("eight", 1000, 1024, DeviceRequest(count=8))
    before = engine.explain(eight)
    assert before is not None
    assert [(r.reason.name, r.count) for r in before.reasons] == [("INSUFFICIENT_DEVICE_MEMORY", 2)]
    engine.state.set_device_cordoned("a-gpu7", cordoned=True)
    after = engine.explain(eight)
    assert after is not None
    assert {r.reason.name for r in after.reasons} == {
        "INSUFFICIENT_DEVICE_MEMORY",
        "DEVICE_UNHEALTHY",
    }
    assert after.reasons == _explained_fresh(engine.state, eight)


def _explained_fresh(state: ClusterState, req: Request) -> object:
    return _fresh_view(state, req)[2]


def _mixed_state() -> ClusterState:
    """Cards of two sizes, link groups, a task limit per card on some, a little CPU on others,
    NoSchedule taints of two kinds on two nodes (a check that words each node apart): every check
    of a refusal can be the first to fail somewhere."""
    nodes = [gpu_node(f"a{i}", count=8, group_size=4, cpu_milli=8_000) for i in range(4)]
    nodes[0] = replace(nodes[0], taints=(parse_taint("t", "gpu=true:NoSchedule"),))
    nodes[1] = replace(nodes[1], taints=(parse_taint("t", "team=x:NoSchedule"),))
    nodes += [gpu_node(f"t{i}", count=4, group_size=2, max_tasks=2) for i in range(3)]
    nodes += [
        gpu_node(f"b{i}", model=A10, count=4, memory_mib=24576, group_size=0) for i in range(3)
    ]
    return ClusterState(nodes, seed=5)


REFUSED = (
    *SHAPES,
    DeviceRequest(count=1, core_permille=600, memory_mib=1024),
    DeviceRequest(count=1, memory_mib=70_000),
    DeviceRequest(count=4, topology=Topology.SAME_LINK_GROUP),
    DeviceRequest(count=1, core_permille=100, memory_permille=100, models=("A10",)),
)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, len(REFUSED) - 1), st.integers(0, 9), st.integers(1, 12)),
        max_size=50,
    )
)
@pytest.mark.slow
def test_refusals_from_the_kept_counts_equal_the_replay(steps: list[tuple[int, int, int]]) -> None:
    """A refusal read from the capacity parts' kept counts names, for every node, the same first
    failing check as replaying the chain check by check (node checks, static checks, memory,
    cores, a task slot, the link group), after any mix of placements, releases and cordons."""
    engine = Engine(_mixed_state(), "binpack")
    state, pipe = engine.state, engine.pipeline
    for i, (shape, action, cpus) in enumerate(steps):
        if action == 9 and state.live:
            engine.release(sorted(state.live)[i % len(state.live)])
        elif action == 8:
            uuid = state.slot_uuid[sorted(state.slot_uuid)[i % len(state.slot_uuid)]]
            state.set_device_cordoned(uuid, cordoned=i % 2 == 0)
        else:
            engine.place(Request(f"r{i}", 1000 * cpus, 1024, REFUSED[shape]))
        for j, devices in enumerate(REFUSED):
            req = Request(f"q{j}", 1000 * cpus, 1024, devices)
            ctx = pipe.context(req)
            pipe.filter(ctx)
            assert ctx.passed is not None
            counted = pipe.blame(ctx).tolist()
            refusal = None if ctx.node_fit.any() else pipe.explain(ctx)
            _, counted_labels = pipe._blame(ctx)
            ctx.passed = None  # the replay
            assert pipe.blame(ctx).tolist() == counted
            assert (None if ctx.node_fit.any() else pipe.explain(ctx)) == refusal
            # labels numbered in the checks' order in both (the verdicts read the deepest):
            # one counted label per replayed one, in the same order
            _, replayed_labels = pipe._blame(ctx)
            pairs = sorted(set(zip(replayed_labels.tolist(), counted_labels.tolist(), strict=True)))
            assert len({r for r, _ in pairs}) == len(pairs)
            assert [c for _, c in pairs] == sorted({c for _, c in pairs})


def test_kept_answers_follow_nodes_added_after_them() -> None:
    """A node added after a shape's answer was kept (a new epoch, a longer grid) is in the next
    answers, and placements on it are followed row by row like any other node's."""
    engine = Engine(_state(), "binpack")
    state = engine.state
    shape = DeviceRequest(count=1, core_permille=250, memory_permille=250)
    for i in range(3):
        assert engine.place(Request(f"r{i}", 1000, 1024, shape)).ok
    for j in range(3):
        state.add_node(gpu_node(f"new{j}", count=8, group_size=4))
        for i in range(40):  # fills the older nodes' fitting cards, then the new ones'
            engine.place(Request(f"s{j}.{i}", 1000, 1024, DeviceRequest(count=2)))
            req = Request("q", 1000, 1024, shape)
            ctx = engine.pipeline.context(req)
            engine.pipeline.filter(ctx)
            assert ctx.dev_fit is not None
            reasons = None if ctx.node_fit.any() else engine.pipeline.explain(ctx).reasons
            assert (ctx.node_fit.tobytes(), ctx.dev_fit.tobytes(), reasons) == _fresh_view(
                state, req
            )
