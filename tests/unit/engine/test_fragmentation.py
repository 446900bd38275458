"""Fragmentation of hand-made nodes against a hand-made target workload."""

from __future__ import annotations

import numpy as np
import pytest

from xpupool.engine import ClusterState, Engine
from xpupool.engine.fragmentation import (
    FragmentationCache,
    TargetWorkload,
    fragmentation,
    node_view,
    settled,
)
from xpupool.engine.fragmentation.pressure import DevicePressure
from xpupool.engine.scorers.base import ScorerEnv
from xpupool.engine.scorers.fgd import Fgd
from xpupool.model import DeviceRequest, Request
from xpupool.model.allocation import Allocation, DeviceShare

from factories import A10, T4, gpu_node


def share(permille: int, cpu: int = 0, models: tuple[str, ...] = ()) -> Request:
    return Request("s", cpu, 0, DeviceRequest(count=1, core_permille=permille, models=models))


WORKLOAD = TargetWorkload(
    (share(500), Request("w", 0, 0, DeviceRequest(count=1)), Request("c", 1000)), (0.5, 0.3, 0.2)
)


def fragment(engine: Engine, workload: TargetWorkload = WORKLOAD) -> list[float]:
    return FragmentationCache(engine.state, engine.pipeline, workload).current().tolist()


def test_fragment_by_hand() -> None:
    engine = Engine(ClusterState([gpu_node("a", count=2, group_size=0)]))
    engine.place(Request("x", 0, 0, DeviceRequest(count=1, core_permille=700, uuids=("a-gpu1",))))
    # free [1000, 300], idle 1300. share 500 fits on GPU0: fragment 300; whole fits: 300;
    # CPU-only: all 1300. F = 0.5 * 300 + 0.3 * 300 + 0.2 * 1300 = 500
    assert fragment(engine) == pytest.approx([500.0])


def test_cpu_shortage_and_wrong_model_make_all_idle_a_fragment() -> None:
    engine = Engine(ClusterState([gpu_node("a", count=2, group_size=0, cpu_milli=500)]))
    workload = TargetWorkload((share(500, cpu=1000), share(500, models=("T4",))), (0.5, 0.5))
    assert fragment(engine, workload) == pytest.approx([2000.0])
    t4 = Engine(
        ClusterState(
            [gpu_node("t", model=T4, memory_mib=15360, count=2, group_size=0, cpu_milli=500)]
        )
    )
    assert fragment(t4, workload) == pytest.approx([1000.0])  # only the CPU-short shape is blocked


def test_cache_recomputes_only_changed_nodes() -> None:
    engine = Engine(ClusterState([gpu_node("a", group_size=0), gpu_node("b", group_size=0)]))
    cache = FragmentationCache(engine.state, engine.pipeline, WORKLOAD)
    before = cache.current().copy()
    engine.place(Request("x", 0, 0, DeviceRequest(count=1, core_permille=700, uuids=("b-gpu0",))))
    after = cache.current()
    assert after[0] == before[0]
    assert after[1] == pytest.approx(before[1] + 0.5 * 300 + 0.3 * 300 - 0.2 * 700)


def test_target_workload_keeps_the_popular_shapes_and_renormalises() -> None:
    reqs = [share(500)] * 60 + [share(300)] * 30 + [share(100)] * 6 + [share(200)] * 4
    workload = TargetWorkload.from_requests(reqs, coverage=0.95)
    # 60 + 30 = 90 % < 95 %, 96 % with the third: three shapes, weights 60/96, 30/96, 6/96
    assert [s.devices.core_permille for s in workload.shapes] == [500, 300, 100]
    assert np.allclose(workload.weights, [60 / 96, 30 / 96, 6 / 96])


def test_target_workload_ties_sort_by_shape_descending() -> None:
    reqs = [share(100), share(300), share(200)]
    workload = TargetWorkload.from_requests(reqs, coverage=0.5)
    assert [s.devices.core_permille for s in workload.shapes] == [300, 200]


@pytest.mark.parametrize("capped", [False, True])
@pytest.mark.parametrize("limit", [None, 2])
def test_fgd_evaluation_equals_placing_and_recomputing_on_a_fleet_of_several_kinds(
    capped: bool, limit: int | None
) -> None:
    """FGD evaluates a placement incrementally, over the shapes each node can serve, in compiled
    loops (``engine/fragmentation/kernels.py``); it must equal applying the placement and
    recomputing the node's fragmentation from scratch in plain NumPy, for every candidate node (and
    every fitting card of a one-card replica), on nodes of several kinds, with the CPU cap and
    without, with and without a task limit on the A100 cards (``limit``)."""
    fleet = [
        *(
            gpu_node(f"a{i}", count=4, group_size=2, cpu_milli=24_000, max_tasks=limit)
            for i in range(3)
        ),
        *(gpu_node(f"t{i}", model=T4, memory_mib=15360, count=4, group_size=0) for i in range(3)),
        gpu_node("n", model=A10, memory_mib=24576, count=2, group_size=0, cpu_milli=8_000),
    ]
    workload = TargetWorkload(
        (
            share(500, cpu=4000),
            share(250, models=("T4",)),
            Request("w", 8000, 0, DeviceRequest(count=1, models=("A100",))),
            Request("p", 2000, 0, DeviceRequest(count=2)),
            Request("c", 4000),
        ),
        (0.3, 0.2, 0.2, 0.2, 0.1),
    )
    engine = Engine(ClusterState(fleet, seed=3), "fgd", seed=3, workload=workload)
    scorer = Fgd(ScorerEnv(3, engine.pipeline, workload), capped=capped)
    stream = [
        share(300, cpu=2000),
        Request("m", 3000, 0, DeviceRequest(count=1, memory_permille=400, core_permille=200)),
        Request("g", 1000, 0, DeviceRequest(count=1, memory_mib=6000, core_permille=100)),
        share(600, models=("T4",)),
        Request("w", 4000, 0, DeviceRequest(count=1)),
        Request("p", 2000, 0, DeviceRequest(count=2)),
        Request("c", 6000),
    ]
    state, table = engine.state, scorer.frag.table
    checked = 0
    for step in range(35):
        req = stream[step % len(stream)]
        ctx = engine.pipeline.context(req)
        engine.pipeline.filter(ctx)
        scorer.frag.current()
        nodes = np.flatnonzero(ctx.node_fit)
        if not nodes.size:
            break
        evaluated = scorer.after.evaluate_nodes(ctx, table, nodes)
        for position, node in enumerate(nodes.tolist()):
            if ctx.k == 1:
                assert ctx.dev_fit is not None
                options = [[c] for c in np.flatnonzero(ctx.dev_fit[node]).tolist()]
            elif ctx.k:
                assert ctx.dev_fit is not None
                options = [np.flatnonzero(ctx.dev_fit[node])[: ctx.k].tolist()]
            else:
                options = [[]]
            for columns in options:
                shares = tuple(
                    DeviceShare(
                        uuid=state.slot_uuid[node * state.width + c],
                        slot=node * state.width + c,
                        memory_mib=ctx.need_mib
                        if isinstance(ctx.need_mib, int)
                        else int(ctx.need_mib[node, c]),
                        core_permille=ctx.need_core,
                    )
                    for c in columns
                )
                probe = Allocation(
                    id=10_000 + checked,
                    request_name="probe",
                    replica=0,
                    node=state.node_names[node],
                    node_index=node,
                    cpu_milli=req.cpu_milli,
                    memory_mib=req.memory_mib,
                    devices=shares,
                )
                state.apply(probe)
                expected = fragmentation(state, table, np.asarray([node]), capped)[0]
                state.revert(probe.id)
                got = evaluated[position, columns[0]] if ctx.k == 1 else evaluated[position]
                assert got == pytest.approx(expected, abs=1e-6), (step, node, columns)
                checked += 1
        assert engine.place(req).ok
    assert checked > 100


def test_settled_fragments_do_not_depend_on_summation_order() -> None:
    """The same weighted sum in two orders can differ in the last bits; settled, it is one value,
    so a placement that changes nothing has a delta of exactly 0 (FGD's score exactly 50)."""
    weights = np.array(
        [0.0008548, 0.2676311, 0.0104834, 0.2277554, 0.0548293, 0.2694336, 0.1690124]
    )
    fragments = np.array([6526.0, 643.0, 2397.0, 3848.0, 3381.0, 3225.0, 226.0])
    forward = float(fragments @ weights)
    backward = float(sum(f * w for f, w in zip(fragments[::-1], weights[::-1], strict=True)))
    pairs = [(forward, backward)]
    rng = np.random.default_rng(0)
    for _ in range(200):  # and a few hundred more sums of whole thousandths in two orders
        w = rng.random(12)
        f = rng.integers(0, 8000, 12).astype(np.float64)
        pairs.append((float(f @ w), float(sum(f[::-1] * w[::-1]))))
    assert any(a != b for a, b in pairs)  # the raw sums do differ somewhere
    for a, b in pairs:
        assert settled(np.array([a]))[0] == settled(np.array([b]))[0]


def test_cached_quantities_equal_the_numpy_definition_after_placements() -> None:
    """The cache's per-shape quantities (compiled, ``kernels.refresh``) are FGD's ``T``,
    ``usable``, ``U`` and ``cnt`` of ``node_view`` exactly, and its fragments ``fragmentation``'s,
    on a fleet of several kinds after shares, whole cards and pairs have landed."""
    fleet = [
        *(gpu_node(f"a{i}", count=4, group_size=2, cpu_milli=16_000) for i in range(2)),
        *(gpu_node(f"t{i}", model=T4, memory_mib=15360, count=4, group_size=0) for i in range(2)),
    ]
    workload = TargetWorkload(
        (
            share(500, cpu=4000),
            share(250, models=("T4",)),
            Request("m", 1000, 0, DeviceRequest(count=1, memory_mib=9000)),
            Request("p", 2000, 0, DeviceRequest(count=2)),
        ),
        (0.4, 0.2, 0.2, 0.2),
    )
    engine = Engine(ClusterState(fleet, seed=5), "fgd", seed=5, workload=workload)
    for req in [share(300, cpu=2000), share(700), Request("p", 2000, 0, DeviceRequest(count=2))]:
        assert engine.place(req).ok
    cache = FragmentationCache(engine.state, engine.pipeline, workload, capped=True)
    values = cache.current()
    nodes = np.arange(engine.state.n_nodes)
    view = node_view(engine.state, cache.table, nodes)
    usable, usable_idle, usable_count, idle = cache.cached()
    assert np.array_equal(idle, view.idle)
    assert np.array_equal(usable, view.usable)
    assert np.array_equal(usable_idle, view.usable_idle)
    assert np.array_equal(usable_count, view.usable_count)
    assert len(set(idle.tolist())) > 1  # the placements made the nodes differ
    expected = fragmentation(engine.state, cache.table, nodes, capped=True)
    assert values == pytest.approx(expected, abs=1e-6)


def test_what_is_kept_equals_what_is_computed_afresh_after_placements_and_reverts() -> None:
    """The kept measure (each node's fragment now), the kept fragments after placement and the
    device pressure are brought up to date only on the nodes changed since (the state's change
    log, each node's version): after placements and reverts of every kind, each equals a fresh
    computation over every node to the bit, so no change was missed."""
    fleet = [
        *(gpu_node(f"a{i}", count=4, group_size=2, cpu_milli=16_000) for i in range(3)),
        *(gpu_node(f"t{i}", model=T4, memory_mib=15360, count=4, group_size=0) for i in range(2)),
    ]
    pair = Request("p", 2000, 0, DeviceRequest(count=2))
    mib = Request("g", 1000, 0, DeviceRequest(count=1, memory_mib=6000, core_permille=100))
    part = Request("m", 3000, 0, DeviceRequest(count=1, memory_permille=400, core_permille=200))
    stream = [share(300, cpu=2000), pair, mib, part, share(600, models=("T4",)), Request("c", 6000)]
    workload = TargetWorkload(tuple(stream), (0.3, 0.2, 0.1, 0.1, 0.2, 0.1))
    engine = Engine(ClusterState(fleet, seed=4), "fgd", seed=4, workload=workload)
    scorer = Fgd(ScorerEnv(4, engine.pipeline, workload))
    state = engine.state
    pressure = DevicePressure(state, scorer.frag.table)
    assert pressure.active  # the T4 shares contend for the T4 cards
    checked = 0
    for step in range(30):
        req = stream[step % len(stream)]
        ctx = engine.pipeline.context(req)
        engine.pipeline.filter(ctx)
        seen = scorer.after.evaluate(ctx)
        fresh = FragmentationCache(state, engine.pipeline, workload).current()
        assert np.array_equal(seen.before, fresh)
        assert np.array_equal(
            pressure.current(), DevicePressure(state, scorer.frag.table).current()
        )
        if seen.candidates.size:
            kept = seen.after.frag_after[seen.candidates]
            again = settled(scorer.after.evaluate_nodes(ctx, scorer.frag.table, seen.candidates))
            assert np.array_equal(kept, again), (step, req.name)
            checked += 1
        placed = engine.place(req)
        if step % 4 == 3 and placed.ok:  # some placements are taken back
            for alloc in placed.allocations:
                state.revert(alloc.id)
    assert checked > 20
