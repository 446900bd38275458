"""The default policy on clusters small enough to work its choice out by hand.

Each case builds a cluster where FGD's own fragmentation cannot tell the candidates apart (or gets
it wrong), so that the choice follows from the one part of the policy under test; every case is run
under several seeds, because ties between equal scores go to the seeded node order.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from xpupool.engine import DEFAULT_PROFILE, ClusterState, Engine, make_profile
from xpupool.engine.fragmentation import TargetWorkload
from xpupool.engine.fragmentation.workload_model import WorkloadModel, cpu_bound
from xpupool.engine.profile import BUILTIN_PROFILES
from xpupool.model import DeviceRequest, Request

from factories import cpu_node, gpu_node

SEEDS = range(6)


def whole(cpu: int, name: str = "w") -> Request:
    return Request(name, cpu_milli=cpu, devices=DeviceRequest(count=1))


def share(cpu: int, permille: int, name: str = "s") -> Request:
    return Request(name, cpu_milli=cpu, devices=DeviceRequest(count=1, core_permille=permille))


# FGD's measure alone, and xpupool's policy alone: the built-in profiles also send CPU-only work
# to nodes without devices first (the cpu-only scorer), which these tests look past.
FGD_ALONE = make_profile("fgd-alone", {"fgd": 1})
XPUPOOL_ALONE = replace(
    BUILTIN_PROFILES["xpupool"],
    name="xpupool-alone",
    scorers=tuple(s for s in BUILTIN_PROFILES["xpupool"].scorers if s[0] != "cpu-only"),
)


def node_of(engine: Engine, req: Request) -> str:
    placement = engine.place(req)
    assert placement.ok, placement.failures
    return placement.allocations[0].node


def test_the_engine_default_is_xpupool() -> None:
    from xpupool import cli

    engine = Engine(ClusterState([gpu_node("a", count=1, group_size=0)]))
    assert engine.profile.name == DEFAULT_PROFILE == "xpupool" == cli.DEFAULT_PROFILE


def model_of(engine: Engine) -> WorkloadModel:
    """The workload model the engine's profile's plugins share."""
    return engine._model(engine.profile)


@pytest.mark.parametrize("seed", SEEDS)
def test_when_cpu_binds_cpu_is_not_taken_where_it_would_strand_idle_gpus(seed: int) -> None:
    # The workload is one-GPU tasks with 8 cores; the device nodes have 8 cores per GPU, so the
    # workload is CPU-bound. A CPU-only 4-core task on "two" (2 GPUs, 16 cores) leaves CPU for one
    # such task while two GPUs are idle: 1000 of its 2000 idle strand. On "cpu" (no GPU) nothing
    # strands. FGD without the CPU cap sees "a task still fits" on both and cannot tell them apart.
    nodes = [
        gpu_node("two", count=2, group_size=0, cpu_milli=16_000),
        gpu_node("one", count=1, group_size=0, cpu_milli=8000),
        cpu_node("cpu", cpu_milli=8000),
    ]
    workload = TargetWorkload((whole(8000),), (1.0,))
    state = ClusterState(nodes, seed=seed)
    assert cpu_bound(workload, state)
    engine = Engine(state, XPUPOOL_ALONE, seed=seed, workload=workload)
    assert node_of(engine, Request("cpu-only", cpu_milli=4000)) == "cpu"
    fgd = Engine(ClusterState(nodes, seed=seed), FGD_ALONE, seed=seed, workload=workload)
    fits, scores = fgd.rate(Request("cpu-only", cpu_milli=4000))
    assert fits.all() and scores[0] == scores[2] > scores[1]


def test_a_workload_with_cpu_to_spare_is_not_cpu_bound() -> None:
    state = ClusterState([gpu_node("a", count=8, group_size=0, cpu_milli=96_000)])
    assert not cpu_bound(TargetWorkload((whole(8000),), (1.0,)), state)  # 8 of 12 cores per GPU
    assert cpu_bound(TargetWorkload((whole(12_000),), (1.0,)), state)
    assert not cpu_bound(TargetWorkload((), ()), state)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_share_joins_the_fullest_card_when_fragmentation_ties(seed: int) -> None:
    # Workload: 0.5-GPU shares. A first share is pinned to card 1. A second on card 1 fills it and
    # keeps card 0 whole; on card 0 it leaves two half cards, each still usable by a 0.5 share:
    # fragmentation is 0 either way, so the fullest card (1) wins, where FGD takes the lowest (0).
    nodes = [gpu_node("a", count=2, group_size=0)]
    workload = TargetWorkload((share(1000, 500),), (1.0,))
    engine = Engine(ClusterState(nodes, seed=seed), "xpupool", seed=seed, workload=workload)
    pinned = Request(
        "first",
        cpu_milli=1000,
        devices=DeviceRequest(count=1, core_permille=500, uuids=("a-gpu1",)),
    )
    assert engine.place(pinned).allocations[0].devices[0].uuid == "a-gpu1"
    assert engine.place(share(1000, 500, "second")).allocations[0].devices[0].uuid == "a-gpu1"


def test_without_a_workload_it_learns_one_from_the_requests_it_places() -> None:
    engine = Engine(ClusterState([gpu_node("a", count=8, group_size=0)]))
    model = model_of(engine)
    for i in range(12):
        assert engine.place(share(1000, 250, f"s{i}")).ok
    shapes = model.frag.workload.shapes
    assert [s.devices.core_permille for s in shapes] == [250]
    assert engine.place(whole(1000)).ok  # one more shape, still fits, nothing breaks


def test_half_resolution_for_one_card_replicas_fgds_score_for_several_cards() -> None:
    # Two engines on the same partly used cluster, one with xpupool's fragmentation and
    # fullest-card scorers at the built-in weights, one FGD, the same workload (not CPU-bound). A
    # 2-GPU replica is scored exactly as FGD scores it; a one-card share gets the primary score at
    # half resolution (even levels) plus the fullest-card term (< 0.01).
    nodes = [gpu_node(f"n{i}", count=4, group_size=0, cpu_milli=128_000) for i in range(6)]
    workload = TargetWorkload(
        (
            share(1000, 300),
            share(1000, 700),
            whole(1000),
            Request("two", 1000, 0, DeviceRequest(2)),
        ),
        (0.4, 0.2, 0.3, 0.1),
    )
    terms = make_profile("terms", {"fragmentation": 1, "fullest-card": 0.0001})
    engines = {
        p.name if not isinstance(p, str) else p: Engine(
            ClusterState(nodes, seed=3), p, seed=3, workload=workload
        )
        for p in (terms, "fgd")
    }
    for i, (node, card, permille) in enumerate(
        [(0, 0, 300), (0, 1, 700), (1, 0, 500), (2, 2, 900), (3, 0, 1000), (3, 1, 200), (4, 3, 600)]
    ):
        pinned = Request(
            f"p{i}",
            cpu_milli=1000,
            devices=DeviceRequest(count=1, core_permille=permille, uuids=(f"n{node}-gpu{card}",)),
        )
        for engine in engines.values():
            assert engine.place(pinned).ok
    two = Request("x", cpu_milli=1000, devices=DeviceRequest(count=2))
    fits, ours = engines["terms"].rate(two)
    _, fgds = engines["fgd"].rate(two)
    assert fits.sum() >= 3
    assert ours[fits].tolist() == fgds[fits].tolist()
    assert any(int(v) % 2 for v in fgds[fits])  # half resolution would have changed these
    fits, ours = engines["terms"].rate(share(1000, 300, "y"))
    primary = ours[fits] - ours[fits] % 2
    assert all(0 <= t < 0.01 for t in ours[fits] - primary)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_cpu_only_replica_goes_where_cpu_is_spare_beyond_what_idle_gpus_will_need(
    seed: int,
) -> None:
    # The workload asks 10 cores per GPU; not CPU-bound (the GPU nodes have 20 per GPU), so FGD's
    # fragmentation cannot tell the nodes apart for a CPU-only task (it takes no GPU). Spare CPU
    # beyond 10 cores per idle GPU: "poor" 96 - 80 = 16 cores, "rich" 104 - 20 = 84, "cpu" 8.
    nodes = [
        gpu_node("poor", count=8, group_size=0, cpu_milli=96_000),
        gpu_node("rich", count=2, group_size=0, cpu_milli=104_000),
        cpu_node("cpu", cpu_milli=8000),
    ]
    workload = TargetWorkload((whole(10_000),), (1.0,))
    state = ClusterState(nodes, seed=seed)
    assert not cpu_bound(workload, state)
    fgd = Engine(ClusterState(nodes, seed=seed), FGD_ALONE, seed=seed, workload=workload)
    fits, scores = fgd.rate(Request("cpu-only", cpu_milli=4000))
    assert fits.all() and len(set(scores.tolist())) == 1
    engine = Engine(state, XPUPOOL_ALONE, seed=seed, workload=workload)
    assert node_of(engine, Request("cpu-only", cpu_milli=4000)) == "rich"
    # The built-in profile takes the free CPU-only node first (issue 42, part 3).
    engine = Engine(ClusterState(nodes, seed=seed), "xpupool", seed=seed, workload=workload)
    assert node_of(engine, Request("cpu-only", cpu_milli=4000)) == "cpu"


@pytest.mark.parametrize("profile", ["xpupool", "xpupool-greedy"])
def test_a_share_does_not_spoil_a_gap_that_the_workload_fills_better(profile: str) -> None:
    # Workload: whole cards (half the tasks), 0.47 shares (a quarter), 0.32 and 0.65 shares. Card 0
    # holds a 0.47, card 1 is whole, and a 0.32 arrives. In card 0's 0.53 it leaves 0.21 that no
    # shape uses; on card 1 it leaves 0.68 that whole-card tasks cannot use. FGD counts that 0.68 as
    # fragment and takes card 0 (F: 331 -> 210 there, 331 -> 671 on card 1). The share prices
    # (engine/fragmentation/prices.py) see that 0.53 is worth a second 0.47 (a price of 1/2, two
    # 0.47 to a card) and the 0.32 only its own (at most 1/3, three to a card): a loss of at least
    # 1/6 card on card 0, none on card 1, whose 0.68 takes a 0.65 as the workload's best packing
    # does.
    nodes = [gpu_node("a", count=2, group_size=0)]
    shapes = (whole(1000), share(1000, 470), share(1000, 320), share(1000, 650))
    workload = TargetWorkload(shapes, (0.5, 0.25, 0.125, 0.125))
    pinned = Request(
        "first",
        cpu_milli=1000,
        devices=DeviceRequest(count=1, core_permille=470, uuids=("a-gpu0",)),
    )
    for policy, card in ((profile, "a-gpu1"), ("fgd", "a-gpu0")):
        engine = Engine(ClusterState(nodes, seed=0), policy, seed=0, workload=workload)
        assert engine.place(pinned).ok
        placed = engine.place(share(1000, 320, "second"))
        assert placed.allocations[0].devices[0].uuid == card, policy


def test_the_online_workload_is_priced_as_it_is_learned() -> None:
    # Without a given workload the prices follow the one learned from the requests: none before a
    # share was seen, then the shares' sizes, re-solved at each re-learn.
    engine = Engine(ClusterState([gpu_node("a", count=8, group_size=0)]))
    assert engine.place(whole(1000, "w0")).ok
    model = model_of(engine)
    assert model.prices is None
    for i in range(8):
        assert engine.place(share(1000, 500 if i % 4 == 0 else 300, f"s{i}")).ok
    assert model.prices is not None
    assert model.prices.sizes.tolist() == [300, 500]
    assert model.prices.value[1000] == pytest.approx(1.0)


def test_online_workload_learns_refused_requests_too() -> None:
    # Without a target workload xpupool learns one from what the engine is asked to place: the
    # engine tells it every request once decided, so one that fits nowhere is learned as well.
    engine = Engine(ClusterState([gpu_node("a", count=2, group_size=0)]), "xpupool")
    model = model_of(engine)
    fits = Request("fits", cpu_milli=1000, devices=DeviceRequest(count=1))
    too_big = Request("too-big", cpu_milli=1000, devices=DeviceRequest(count=4))
    assert engine.place(fits).ok and not engine.place(too_big).ok
    assert [r.name for r in model.seen] == ["fits", "too-big"]
    assert {s.devices.count for s in model.frag.workload.shapes} == {1, 4}


def test_the_shared_model_is_fed_once_per_request_whatever_the_profile_enables() -> None:
    # Five plugins of the xpupool profile build on one model: each request is learned once, and a
    # profile with one of them alone learns as well.
    engine = Engine(ClusterState([gpu_node("a", count=2, group_size=0)]), "xpupool")
    assert engine.place(whole(1000, "one")).ok
    assert [r.name for r in model_of(engine).seen] == ["one"]
    alone = Engine(ClusterState([gpu_node("a", count=2, group_size=0)]), "xpupool")
    alone.profile = make_profile("alone", {"spare-cpu": 1})
    alone.profiles["alone"] = alone.profile
    assert alone.place(whole(1000, "two")).ok
    assert [r.name for r in model_of(alone).seen] == ["two"]


def _unnamed(workload: TargetWorkload) -> tuple[tuple[object, ...], tuple[float, ...]]:
    """A workload's shapes and weights, the shapes' names left out (which request of a shape
    represents it is not part of it)."""
    shapes = tuple((s.cpu_milli, s.devices) for s in workload.shapes)
    return shapes, workload.weights


def test_the_window_is_counted_as_it_slides_and_learns_what_a_full_count_would() -> None:
    # The learner keeps per-shape counts as requests enter and leave its window instead of
    # going over the whole window at each re-learn (10,000 requests: about 45 ms a time); what it
    # learns is what TargetWorkload.from_requests makes of the same window.
    from xpupool.engine.fragmentation.measure import ShapeCounts
    from xpupool.engine.fragmentation.workload_model import WorkloadArgs

    state = ClusterState([gpu_node("a", count=2, group_size=0)])
    engine = Engine(state, "xpupool")
    model = WorkloadModel(state, engine.pipeline, None, WorkloadArgs(window=7))
    stream = [share(1000, 250 * (1 + i % 3), f"r{i}") for i in range(5)]
    stream += [whole(2000, f"w{i}") for i in range(9)] + [share(1000, 500, "last")]
    for req in stream:
        model.observe(req, placed=True)
        window = model.seen
        assert len(window) == min(7, stream.index(req) + 1)
        counts = ShapeCounts()
        for seen in window:
            counts.add(seen)
        assert _unnamed(counts.workload()) == _unnamed(TargetWorkload.from_requests(window))
        assert _unnamed(model._counts.workload()) == _unnamed(TargetWorkload.from_requests(window))
    learned = [d.core_permille for _, d in _unnamed(model.frag.workload)[0]]
    assert learned == [None, 500]  # the wholes, then "last": the first shares left the window


def test_shape_counts_forget_a_shape_whose_last_request_left() -> None:
    from xpupool.engine.fragmentation.measure import ShapeCounts

    counts = ShapeCounts()
    a, b = whole(1000, "a"), share(1000, 500, "b")
    for req in (a, b, a):
        counts.add(req)
    counts.remove(b)
    assert len(counts.first) == 1 and sum(counts.counts.values()) == 2
    assert counts.workload().weights == (1.0,)
    counts.remove(a)
    counts.remove(a)
    assert counts.workload() == TargetWorkload((), ())


def test_a_relearn_that_finds_the_same_workload_keeps_what_is_built_on_it() -> None:
    # Re-learning rebuilds the shape table, the measure, the pressure and the lookahead (40 ms
    # a time at 5,000 nodes): it is done only when a shape came or went or more than
    # relearn_change of the probability moved.
    from xpupool.engine.fragmentation.workload_model import WorkloadArgs, moved

    state = ClusterState([gpu_node("a", count=2, group_size=0)])
    engine = Engine(state, "xpupool")
    args = WorkloadArgs(relearn_after=0.0, relearn_change=0.2)  # every observe is due
    model = WorkloadModel(state, engine.pipeline, None, args)
    half, full = share(1000, 500, "h"), whole(1000, "w")
    for req in (half, full, half, full):
        model.observe(req, placed=True)
    built = model.generation
    assert _unnamed(model.frag.workload)[1] == (0.5, 0.5)
    for req in (half, full, half, half, half, half):  # at most 7 of 10 halves: 0.2 moved
        model.observe(req, placed=True)
        assert model.generation == built and model.frag.workload.weights == (0.5, 0.5)
    model.observe(half, placed=True)  # 8 of 11: 0.227 moved from what is in use
    assert model.generation > built
    assert model.frag.workload.weights == pytest.approx((8 / 11, 3 / 11))
    assert moved(model.frag.workload, model.frag.workload) == 0.0
    other = TargetWorkload((share(1000, 250),), (1.0,))
    assert moved(model.frag.workload, other) == 1.0  # a shape came (and went)


def test_a_rebuilt_engine_goes_on_learning_from_where_its_predecessor_was() -> None:
    # The embedded server and the Kubernetes extender build a new engine when the pool changes
    # (a node joins, leaves or changes); it starts from the old engine's window, not cold.
    before = Engine(ClusterState([gpu_node("a", count=2, group_size=0)]), "xpupool")
    for i in range(6):
        before.place(share(1000, 300 if i % 3 else 600, f"s{i}"))
    grown = ClusterState([gpu_node("a", count=2, group_size=0), gpu_node("b", count=4)])
    after = Engine(grown, "xpupool")
    after.inherit_learning(before)
    model = model_of(after)
    assert [r.name for r in model.seen] == [f"s{i}" for i in range(6)]
    window = TargetWorkload.from_requests(model_of(before).seen)
    assert _unnamed(model.frag.workload) == _unnamed(window)
    assert model.generation == 1  # learned once, from the whole window
    cold = Engine(grown, "xpupool")
    assert model_of(cold).frag.workload.shapes == ()


def test_deferred_learning_waits_for_relearn() -> None:
    # A front that places in batches (the server's scheduling pass) re-learns once after each.
    engine = Engine(ClusterState([gpu_node("a", count=8, group_size=0)]), "xpupool")
    engine.defer_learning()
    model = model_of(engine)
    assert model.deferred
    for i in range(5):
        assert engine.place(share(1000, 250, f"s{i}")).ok
    assert model.due and model.frag.workload.shapes == ()
    engine.relearn()
    assert not model.due and [s.devices.core_permille for s in model.frag.workload.shapes] == [250]
    engine.defer_learning(False)
    for i in range(3):  # learned at once again when due
        assert engine.place(whole(1000, f"w{i}")).ok and not model.due
    assert len(model.frag.workload.shapes) == 2


def _mixed_stream(n: int) -> list[Request]:
    """Whole cards, shares of three sizes, two-card and CPU-only requests, on two models."""
    shapes = [
        share(2000, 250, "q"),
        share(1000, 500, "h"),
        whole(4000, "w"),
        Request("t", cpu_milli=8000, devices=DeviceRequest(count=2)),
        Request("m", cpu_milli=1000, devices=DeviceRequest(count=1, models=("Tesla T4",))),
        Request("c", cpu_milli=4000),
        share(1000, 100, "d"),
    ]
    return [replace(shapes[(i * 7 + i // 5) % len(shapes)], name=f"r{i}") for i in range(n)]


def _mixed_fleet() -> ClusterState:
    nodes = [gpu_node(f"a{i}", count=8) for i in range(6)]
    nodes += [gpu_node(f"t{i}", count=4, model="Tesla T4", memory_mib=15360) for i in range(4)]
    return ClusterState(nodes, seed=3)


@pytest.mark.slow
def test_warming_after_a_relearn_places_exactly_as_building_on_demand() -> None:
    # The embedded server re-learns between passes and builds at once what the next placements
    # would build on the new workload (WorkloadModel.warm): the measure, the pressure, the
    # lookahead's deltas and each shape's fragmentation after placement. Built then or on
    # demand, the values are the same, and so is every placement.
    def run(warm: bool) -> tuple[list[tuple[str, tuple[str, ...]]], int]:
        engine = Engine(_mixed_fleet(), "xpupool")
        engine.defer_learning()
        placed = []
        for i, req in enumerate(_mixed_stream(240)):
            p = engine.place(req)
            placed.append((req.name, tuple(f"{a.node}{a.devices}" for a in p.allocations)))
            if i % 4 == 3:  # a pass of four
                engine.relearn(warm=warm)
        return placed, model_of(engine).generation

    warmed, learned = run(True)
    assert learned > 5  # the workload was built on anew several times
    assert warmed == run(False)[0]
    assert 100 < sum(bool(nodes) for _, nodes in warmed) < 240  # until the pool was full


def test_an_empty_pool_relearns_and_warms() -> None:
    """A server with no nodes yet still learns from what it is asked and warms what the next
    placement would build: nothing to compute, and nothing may fail (the compiled loops size
    their scratch by the node kinds, of which there are none)."""
    engine = Engine(ClusterState([], seed=1), "xpupool", seed=1)
    engine.defer_learning()
    pair = Request("p", 1000, 0, DeviceRequest(count=2))
    share = Request("s", 1000, 0, DeviceRequest(count=1, core_permille=300))
    for req in [pair, share, Request("c", 1000, 0)] * 3:
        assert not engine.place(req).ok
    assert engine.learning_due
    engine.relearn(warm=True)
    assert not engine.learning_due and model_of(engine).frag.workload.shapes


@pytest.mark.parametrize("warm", [False, True])
def test_warming_builds_what_the_next_placement_would(warm: bool) -> None:
    engine = Engine(_mixed_fleet(), "xpupool")
    engine.defer_learning()
    for req in _mixed_stream(12):
        engine.place(req)
    model = model_of(engine)
    assert engine.learning_due
    engine.relearn(warm=warm)
    assert not engine.learning_due and model.frag.workload.shapes
    state = engine.state
    measured = (model.frag.version == state.node_version).all()
    stale = 0
    for shape in model.frag.workload.shapes:  # what the next placement of each would compute
        ctx = engine.pipeline.context(shape)
        engine.pipeline.filter(ctx)
        stale += model.after.evaluate(ctx).recomputed
    assert measured == warm and (stale == 0) == warm
