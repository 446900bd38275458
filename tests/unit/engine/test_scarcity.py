"""Device pressure (engine/fragmentation/pressure.py) on clusters small enough to work it out by hand."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from xpupool.engine import ClusterState, Engine
from xpupool.engine.fragmentation import NEVER, DevicePressure, ShapeTable, TargetWorkload
from xpupool.model import DeviceRequest, Request

from factories import A100, T4, gpu_node


def whole(name: str, models: tuple[str, ...] = ()) -> Request:
    return Request(name, 1000, 1024, DeviceRequest(count=1, models=models))


def pressure(state: ClusterState, workload: TargetWorkload) -> DevicePressure:
    engine = Engine(state, "fgd", workload=workload)
    return DevicePressure(state, ShapeTable(state, engine.pipeline, workload))


def test_a_model_that_only_some_demand_may_use_is_under_more_pressure() -> None:
    # Half the demand may use any card, half only a T4. Idle: 2 T4 cards, 8 A100 cards (10,000).
    # rho(A100) = 0.5 * 10000/10000 = 0.5; rho(T4) = 0.5 + 0.5 * 10000/2000 = 3.0.
    state = ClusterState([gpu_node("t4", model=T4, count=2), gpu_node("a", model=A100, count=8)])
    workload = TargetWorkload((whole("any"), whole("t4", (T4,))), (0.5, 0.5))
    p = pressure(state, workload)
    assert p.active
    assert np.allclose(p.of(np.arange(2)), [[3.0, 3.0] + [0.0] * 6, [0.5] * 8])
    # After one T4 card is taken: idle 1,000 T4 of 9,000; rho(T4) = 0.5 + 0.5 * 9000/1000 = 5.0.
    engine = Engine(state, "binpack")
    assert engine.place(Request("x", 1000, 1024, DeviceRequest(count=1, models=(T4,)))).ok
    assert np.allclose(p.of(np.arange(2))[:, :2], [[5.0, 5.0], [0.5, 0.5]])


def test_a_share_that_breaks_a_whole_card_raises_the_pressure_of_whole_card_shapes() -> None:
    # Half the requests are whole T4 cards (0.8 of the demand), half 0.25 shares anywhere (0.2).
    # A whole-card shape can use only whole cards: I = 4000; U(T4 whole) = 2000, U(shares) = 4000.
    # rho(A100) = 0.2 * 4000/4000 = 0.2; rho(T4) = 0.2 + 0.8 * 4000/2000 = 1.8. After a share
    # breaks one T4 card: I = 3750, U(T4 whole) = 1000, U(shares) = 3750: rho(T4) = 0.2 + 3.0.
    state = ClusterState([gpu_node("t4", model=T4, count=2), gpu_node("a", model=A100, count=2)])
    quarter = Request("q", 1000, 1024, DeviceRequest(count=1, core_permille=250))
    p = pressure(state, TargetWorkload((whole("t4", (T4,)), quarter), (0.5, 0.5)))
    assert np.allclose(p.of(np.arange(2))[:, :2], [[1.8, 1.8], [0.2, 0.2]])
    engine = Engine(state, "binpack")
    one = Request("x", 1000, 1024, DeviceRequest(count=1, core_permille=250, uuids=("t4-gpu0",)))
    assert engine.place(one).ok
    assert np.allclose(p.of(np.arange(2))[:, :2], [[3.2, 3.2], [0.2, 0.2]])


def test_no_pressure_when_every_shape_may_use_every_card() -> None:
    state = ClusterState([gpu_node("t4", model=T4, count=2), gpu_node("a", count=8)])
    workload = TargetWorkload(
        (whole("any"), Request("s", 1000, 1024, DeviceRequest(count=1, core_permille=500))),
        (0.5, 0.5),
    )
    assert not pressure(state, workload).active


def big_jobs(weight: float, cores: int) -> TargetWorkload:
    """8-card jobs of ``cores`` cores (weight ``weight``) and one-card 8-core jobs (the rest)."""
    big = Request("big", cores * 1000, 1024, DeviceRequest(count=8))
    small = Request("small", 8000, 1024, DeviceRequest(count=1))
    return TargetWorkload((big, small), (weight, 1.0 - weight))


def fleet_with_one_big_node() -> ClusterState:
    # Four 8-card nodes; only the first has the 128 cores a 120-core job needs.
    return ClusterState(
        [
            gpu_node("big", cpu_milli=128_000),
            *(gpu_node(f"n{i}", cpu_milli=96_000) for i in range(3)),
        ]
    )


def test_cards_of_the_only_nodes_that_can_host_an_over_asked_shape_are_contended() -> None:
    # Half the jobs ask 8 cards and 120 cores: 0.5 * 8000 of 0.5 * 8000 + 0.5 * 1000 = 8/9 of the
    # device demand, from the 8 of 32 cards whose node has 128 cores (1/4): they alone ask more
    # of those hosts than the fleet's mean, so the hosts' cards are the big jobs' cards.
    # I = 32,000; U(big) = 8,000, U(small) = 32,000:
    # rho(big node) = 1/9 * 32000/32000 + 8/9 * 32000/8000 = 1/9 + 32/9; rho(others) = 1/9.
    state = fleet_with_one_big_node()
    p = pressure(state, big_jobs(0.5, 120))
    assert p.active
    rho = p.of(np.arange(4))
    assert np.allclose(rho[0], 33 / 9)
    assert np.allclose(rho[1:], 1 / 9)


def test_hosts_that_are_plenty_leave_the_pressure_alone() -> None:
    # 2 % of the jobs ask 8 cards and 120 cores: 0.02 * 8000 / (160 + 980) = 0.14 of the demand,
    # under the hosts' quarter of the cards. The fragmentation measure handles such a limit; the
    # pressure does not price the big node apart.
    assert not pressure(fleet_with_one_big_node(), big_jobs(0.02, 120)).active
    # 8-card jobs that every node can host: nothing to narrow either.
    assert not pressure(fleet_with_one_big_node(), big_jobs(0.5, 64)).active


@pytest.mark.parametrize("seed", range(6))
def test_a_share_that_may_run_anywhere_leaves_the_contended_card_unless_the_next_task_needs_it(
    seed: int,
) -> None:
    # Workload: half T4-only 0.5 shares, half whole cards on any model. One T4 node with card 0
    # half used, one A100 card. A new 0.5 share that may run anywhere:
    #   FGD: on T4 card 0 it fills the half the whole-card shape could not use: +250 (score 56);
    #        on the A100 it leaves 500 idle that neither shape can use, as before: 0 (score 50).
    #   Pressure: q(any) = 500/750, q(T4) = 250/750; idle 1500 T4 + 1000 A100 = 2500, of which
    #        whole cards (what the whole-card shape can use) 2000 and T4 with >= 0.5 free 1500;
    #        rho(A100) = 2/3 * 2500/2000, rho(T4) = rho(A100) + 1/3 * 2500/1500;
    #        displaced on T4 = 500 * 0.556 = 278,
    #        i.e. 6.9 points: T4 56 - 6.9 = 49.1 < 50, and greedily the share goes to the A100.
    # The lookahead (both within a point of the best) looks one task further:
    #   A100: gain 0; next T4 share best on T4 card 0 (+250), next whole card on T4 card 1
    #        (0: the A100's half left is then idle that no shape can use): 0 + 0.5 * 250 = 125;
    #   T4 card 0: gain +250; next T4 share only on T4 card 1 (-250), next whole card on the
    #        A100 (+500): 250 + 0.5 * (-250) + 0.5 * 500 = 375, and the share fills T4 card 0.
    t4_share = Request("t4s", 1000, 1024, DeviceRequest(count=1, core_permille=500, models=(T4,)))
    workload = TargetWorkload((t4_share, whole("any")), (0.5, 0.5))
    nodes = [gpu_node("t4", model=T4, count=2, group_size=0), gpu_node("a", count=1, group_size=0)]
    engines = {
        p: Engine(ClusterState(nodes, seed=seed), p, seed=seed, workload=workload)
        for p in ("xpupool-greedy", "xpupool", "fgd")
    }
    pinned = Request(
        "half", 1000, 1024, DeviceRequest(count=1, core_permille=500, uuids=("t4-gpu0",))
    )
    new = Request("new", 1000, 1024, DeviceRequest(count=1, core_permille=500))
    for engine in engines.values():
        assert engine.place(pinned).ok
    _, fgd = engines["fgd"].rate(new)
    assert fgd.tolist() == [56.0, 50.0]
    _, ours = engines["xpupool-greedy"].rate(new)
    displaced = 500 * (1 / 3) * 2500 / 1500
    raw = np.array([56 + 0.01 * 1.0 - 0.025 * displaced, 50 + 0.01 * 0.5])  # + fullest-card term
    # The weighted sum keeps these points, plus the constant of the bounded maps: packing (no
    # loss on either card) 100, contention 6.4 * 100.
    assert ours.tolist() == pytest.approx((raw + 100.0 + 640.0).tolist())
    assert engines["xpupool-greedy"].place(new).allocations[0].node == "a"
    (alloc,) = engines["xpupool"].place(new).allocations
    assert (alloc.node, alloc.devices[0].uuid) == ("t4", "t4-gpu0")


def test_pressure_kept_current_matches_the_definition_recomputed_from_scratch() -> None:
    # Twelve nodes (more than the few-changed-nodes fast path), one with a T4 and an A100 side by
    # side and one with an unhealthy card (both counted card by card); placements and releases in
    # between. Every time, rho per card equals the definition evaluated from the state directly.
    mixed = gpu_node("mixed", model=T4, count=2)
    other = gpu_node("mixed-a", model=A100, count=2).devices
    mixed = type(mixed)(
        mixed.name,
        mixed.cpu_milli,
        mixed.memory_mib,
        (mixed.devices[0], replace(other[0], uuid="mixed-gpu1", index=1)),
    )
    nodes = [
        *(gpu_node(f"t{i}", model=T4, count=2) for i in range(5)),
        *(gpu_node(f"a{i}", model=A100, count=4) for i in range(5)),
        gpu_node("sick", model=A100, count=2, healthy=False),
        mixed,
    ]
    state = ClusterState(nodes)
    t4_share = Request("t4s", 1000, 1024, DeviceRequest(count=1, core_permille=400, models=(T4,)))
    workload = TargetWorkload((t4_share, whole("any"), whole("a100", (A100,))), (0.3, 0.5, 0.2))
    p = pressure(state, workload)
    engine = Engine(state, "spread", seed=1)
    rng = np.random.default_rng(7)
    live: list[int] = []
    everyone = np.arange(state.n_nodes)
    for step in range(40):
        assert np.allclose(p.of(everyone), _by_definition(p, state), atol=1e-9), step
        if live and rng.random() < 0.3:
            engine.release(live.pop(int(rng.integers(len(live)))))
            continue
        req = [t4_share, whole("any"), whole("a100", (A100,))][int(rng.integers(3))]
        placed = engine.place(replace(req, name=f"r{step}"))
        live.extend(a.id for a in placed.allocations)


def _by_definition(p: DevicePressure, state: ClusterState) -> np.ndarray:
    """rho(d) = sum over groups g (shapes with the same eligible cards and per-card need t_g) that
    may use d of q_g * I / U_g, U_g = idle compute on g's cards with at least t_g free."""
    table = p.table
    free = np.where(state.dev_usable, state.dev_core_free, 0).astype(np.float64)
    groups: dict[bytes, tuple[np.ndarray, int, float]] = {}
    for m in range(table.weights.size):
        if table.cpu_only[m]:
            continue
        mask = table.need_mib[:, m, :] != NEVER
        need = int(table.need_core[m])
        share = float(table.weights[m] * table.count[m] * need)
        key = mask.tobytes() + bytes(str(need), "ascii")
        old = groups.get(key)
        groups[key] = (mask, need, share + (old[2] if old else 0.0))
    total = sum(q for _, _, q in groups.values())
    used = np.any([mask for mask, _, _ in groups.values()], axis=0)
    idle = float(free[used].sum())
    rho = np.zeros(free.shape)
    for mask, need, q in groups.values():
        usable = float(free[mask & (free >= need)].sum())
        rho += mask * (q / total) * idle / max(usable, 1.0)
    return rho
