"""The one-step lookahead (``engine/fragmentation/lookahead.py``): its value worked out by hand,
and its per-node best deltas of the next shapes checked against placing each shape for real and
measuring again."""

from __future__ import annotations

import numpy as np
import pytest

from xpupool.engine import ClusterState, Engine
from xpupool.engine.fragmentation import (
    FragmentationCache,
    Lookahead,
    ShapeTable,
    TargetWorkload,
)
from xpupool.model import DeviceRequest, Request
from xpupool.model.allocation import Allocation, DeviceShare

from factories import A10, gpu_node

WHOLE = Request("whole", 0, 0, DeviceRequest(count=1))
PAIR = Request("pair", 0, 0, DeviceRequest(count=2))


# Shares, a whole card, a pair, and an A10 share: the next shapes of the mixed fleet's tests
MIXED_SHAPES = (
    Request("q", 2000, 0, DeviceRequest(count=1, core_permille=250)),
    Request("h", 4000, 0, DeviceRequest(count=1, core_permille=500)),
    WHOLE,
    PAIR,
    Request("a10", 1000, 0, DeviceRequest(count=1, core_permille=500, models=(A10,))),
)


def mixed_engine(seed: int, a100s: int, a10s: int) -> Engine:
    """``a100s`` 4-card nodes with 16 cores and ``a10s`` 2-card A10 nodes, no link groups."""
    nodes = [gpu_node(f"a{i}", count=4, group_size=0, cpu_milli=16_000) for i in range(a100s)]
    nodes += [
        gpu_node(f"t{i}", model=A10, memory_mib=24576, count=2, group_size=0) for i in range(a10s)
    ]
    return Engine(ClusterState(nodes, seed=seed), "xpupool-fine")


def lookahead(engine: Engine, workload: TargetWorkload, capped: bool = False) -> Lookahead:
    frag = FragmentationCache(engine.state, engine.pipeline, workload, capped)
    frag.current()
    return Lookahead(frag)


def test_value_by_hand_a_share_keeps_the_only_pair_of_cards_free() -> None:
    """Nodes a and b have one idle card, c two; the next task is a whole card or a pair, each half
    the time. A half card on a (gain 0 by assumption) leaves the whole card b (+500: b's idle card
    stops being a fragment for the pair) and the pair c (delta 0): 0.5 * 500 + 0.5 * 0 = 250.
    On c's first card the whole card still has +500, but the pair fits nowhere any more: it
    counts minus its demand, 0.5 * 500 - 0.5 * 2000 = -750."""
    engine = Engine(
        ClusterState(
            [
                gpu_node("a", count=1, group_size=0),
                gpu_node("b", count=1, group_size=0),
                gpu_node("c", count=2, group_size=0),
            ]
        )
    )
    look = lookahead(engine, TargetWorkload((WHOLE, PAIR), (0.5, 0.5)))
    pool = np.array([0, 2])
    core, mem, taken = taken_on_first_card(engine, 2, 500, 40960)
    values = look.values(engine.state, pool, core, mem, taken, gain=np.zeros(2), cpu=0, memory=0)
    assert values.tolist() == pytest.approx([250.0, -750.0])


def test_the_candidates_own_node_counts_for_the_next_shape_after_the_replica() -> None:
    """One node only: after a half card on a two-card node, the next half card fits beside it
    (on the same card, delta +500: the card is then full) and the value says so."""
    engine = Engine(ClusterState([gpu_node("a", count=2, group_size=0)]))
    half = Request("half", 0, 0, DeviceRequest(count=1, core_permille=500))
    look = lookahead(engine, TargetWorkload((half,), (1.0,)))
    # After the replica: free [500, 1000], the half shape fits both: F = 0. Next half card on
    # card 0: free [0, 1000], F = 0, delta 0; on card 1: [500, 500], F = 0, delta 0.
    core, mem, taken = taken_on_first_card(engine, 1, 500, 40960)
    values = look.values(engine.state, np.array([0]), core, mem, taken, np.zeros(1), 0, 0)
    assert values.tolist() == pytest.approx([0.0])


@pytest.mark.parametrize(("seed", "capped"), [(0, False), (1, False), (2, True), (3, True)])
def test_best_deltas_match_placing_each_next_shape_and_measuring(seed: int, capped: bool) -> None:
    """Random fill of a mixed fleet; for every node and next shape, the kept best delta (kept up
    to date across the fill) equals the best over real placements (state.apply, fragmentation
    measured again, revert) of that shape there, CPU-capped or not."""
    rng = np.random.default_rng(seed)
    engine = mixed_engine(seed, a100s=4, a10s=3)
    shapes = (*MIXED_SHAPES, Request("cpu", 3000))
    workload = TargetWorkload(shapes, (0.3, 0.2, 0.2, 0.1, 0.1, 0.1))
    look = lookahead(engine, workload, capped)
    look.update(engine.state)
    for _ in range(14):
        engine.place(shapes[int(rng.integers(len(shapes)))])
    # The changed nodes are brought up to date beside the candidates of the next call.
    core, mem, taken = taken_on_first_card(engine, 2, 100, 1)
    look.values(engine.state, np.array([0, 4]), core, mem, taken, np.zeros(2), 0, 0)
    assert (look.version == engine.state.node_version).all()
    best = look.best
    state, table = engine.state, look.frag.table
    measure = FragmentationCache(state, engine.pipeline, workload, capped)
    for node in range(state.n_nodes):
        before = float(measure.current()[node])
        for j, row in enumerate(look.rows.tolist()):
            expected = -np.inf
            for cards in placements(state, table, node, row):
                alloc = allocation(state, node, cards, table, row)
                state.apply(alloc)
                after = float(measure.current()[node])
                state.revert(alloc.id)
                expected = max(expected, before - after)
            assert best[j, node] == pytest.approx(expected, abs=1e-6), (node, row)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_best_elsewhere_kept_as_nodes_change_is_the_whole_fleets(seed: int) -> None:
    """Each next shape's best delta elsewhere than each node, kept across placements and releases
    from the nodes that changed, equals the one read off every node's kept deltas (identical
    nodes: many equal bests), after every step."""
    rng = np.random.default_rng(seed)
    engine = mixed_engine(seed, a100s=6, a10s=4)
    shapes = MIXED_SHAPES
    look = lookahead(engine, TargetWorkload(shapes, (0.3, 0.2, 0.2, 0.2, 0.1)))
    look.update(engine.state)
    everyone = np.arange(engine.state.n_nodes)
    held: list[int] = []
    for _ in range(60):
        if held and rng.random() < 0.4:
            engine.release(held.pop(int(rng.integers(len(held)))))
        else:
            placed = engine.place(shapes[int(rng.integers(len(shapes)))])
            held += [a.id for a in placed.allocations] if placed.ok else []
        look.update(engine.state)
        best = look.best
        expected = np.empty((everyone.size, best.shape[0]))
        for node in everyone.tolist():
            others = np.delete(best, node, axis=1)
            expected[node] = others.max(axis=1) if others.shape[1] else -np.inf
        assert np.array_equal(look.best_elsewhere(everyone), expected)


def taken_on_first_card(
    engine: Engine, candidates: int, core: int, mib: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What a replica takes from each card of each candidate: ``core`` and ``mib`` (and a task
    slot) on card 0."""
    taken_core = np.zeros((candidates, engine.state.width), np.int64)
    taken_mem = np.zeros_like(taken_core)
    taken_core[:, 0], taken_mem[:, 0] = core, mib
    return taken_core, taken_mem, taken_core + taken_mem > 0


def placements(state: ClusterState, table: ShapeTable, node: int, row: int) -> list[list[int]]:
    """Every way a table row's shape lands on ``node``: each card with room for a one-card shape,
    the first ``k`` such cards for ``k`` cards; none when node CPU or memory is short."""
    if state.node_cpu_free[node] < table.cpu[row] or state.node_mem_free[node] < table.memory[row]:
        return []
    room = np.flatnonzero(
        (state.dev_core_free[node] >= table.need_core[row])
        & (state.dev_mem_free[node] >= table.need_mib[node, row])
    ).tolist()
    k = int(table.count[row])
    if len(room) < k:
        return []
    return [[c] for c in room] if k == 1 else [room[:k]]


def allocation(
    state: ClusterState, node: int, cards: list[int], table: ShapeTable, row: int
) -> Allocation:
    shares = tuple(
        DeviceShare(
            state.slot_uuid[node * state.width + c],
            node * state.width + c,
            int(table.need_mib[node, row, c]),
            int(table.need_core[row]),
        )
        for c in cards
    )
    return Allocation(
        -1,
        "probe",
        0,
        state.node_names[node],
        node,
        int(table.cpu[row]),
        int(table.memory[row]),
        shares,
        0,
    )


@pytest.mark.parametrize("shapes", [10, 30])
@pytest.mark.slow
def test_the_lookahead_reports_what_share_of_the_device_tasks_it_weighs(shapes: int) -> None:
    """Equally likely shares: the 8 looked at are 8 / shapes of the device tasks. The lookahead
    runs however small that share is (it was once off under half, for its cost)."""
    requests = tuple(
        Request(f"s{i}", 1000, 0, DeviceRequest(count=1, core_permille=100 + 25 * i))
        for i in range(shapes)
    )
    workload = TargetWorkload(requests, tuple([1.0 / shapes] * shapes))
    placed = fill(workload, requests, seed=shapes)
    (note,) = placed["notes"]
    assert f"lookahead over 8 next shapes ({100 * 8 / shapes:.0f} % of device tasks)" in note


def test_no_lookahead_without_device_shapes() -> None:
    """A target workload of CPU-only tasks has no next device shape to look at: xpupool places
    exactly as xpupool-greedy, and says so."""
    cpu_only = (Request("c1", 1000, 0), Request("c2", 4000, 0))
    workload = TargetWorkload(cpu_only, (0.5, 0.5))
    shares = tuple(
        Request(f"s{i}", 1000, 0, DeviceRequest(count=1, core_permille=250 * (i + 1)))
        for i in range(3)
    )
    placed = fill(workload, shares, seed=1)
    (note,) = placed["notes"]
    assert "no lookahead: no device shapes in the target workload" in note
    assert placed["xpupool"] == placed["xpupool-greedy"]


def fill(
    workload: TargetWorkload, requests: tuple[Request, ...], seed: int
) -> dict[str, list[object]]:
    """40 random requests placed by xpupool and by xpupool-greedy on the same six 4-card nodes:
    each policy's (node, card) per replica, and xpupool's notes."""
    nodes = [gpu_node(f"n{i}", count=4, group_size=0) for i in range(6)]
    engines = {
        p: Engine(ClusterState(nodes, seed=5), p, seed=5, workload=workload)
        for p in ("xpupool", "xpupool-greedy")
    }
    rng = np.random.default_rng(seed)
    placed: dict[str, list[object]] = {p: [] for p in engines}
    for _ in range(40):
        req = requests[int(rng.integers(len(requests)))]
        for name, engine in engines.items():
            for alloc in engine.place(req).allocations:
                placed[name].append((alloc.node, alloc.devices[0].uuid))
    placed["notes"] = list(engines["xpupool"].notes())
    return placed
