"""The FGD paper's policies as engine scorers, on hand-made nodes; expected values worked by hand."""

from __future__ import annotations

import numpy as np
import pytest

from xpupool.engine import ClusterState, Engine
from xpupool.engine.fragmentation import TargetWorkload
from xpupool.model import DeviceRequest, Request

from factories import gpu_node


def share(permille: int, cpu: int = 8000) -> Request:
    return Request("s", cpu, 0, DeviceRequest(count=1, core_permille=permille))


def whole(count: int = 1, cpu: int = 8000) -> Request:
    return Request("w", cpu, 0, DeviceRequest(count=count))


def two_nodes(profile: str, **kwargs: object) -> Engine:
    # Node a: 64 cores, node b: 128 cores; 8 GPUs each, PCIe only.
    nodes = [
        gpu_node("a", cpu_milli=64_000, group_size=0),
        gpu_node("b", cpu_milli=128_000, group_size=0),
    ]
    return Engine(ClusterState(nodes), profile, **kwargs)  # type: ignore[arg-type]


def scores(engine: Engine, req: Request, name: str) -> list[float]:
    """The named one-scorer profile's score per node (weight 1, so the scorer's own value)."""
    return engine.rate(req, name)[1].tolist()


def test_dot_product_by_hand() -> None:
    # a: 1 - (0.5 * 8/128 + 1 * 500/8000) / 2 = 0.953125 -> 95; b: 1 - (1 * 0.0625 + 0.0625) / 2 -> 93
    assert scores(two_nodes("dotprod"), share(500), "dotprod") == [95.0, 93.0]


def test_best_fit_by_hand() -> None:
    # a: 100 * (1 - (0.5 * 56/128 + 0.5 * 7500/8000)) = 31.25 -> 31; b: 100 * (1 - 0.9375) -> 6
    assert scores(two_nodes("bestfit"), share(500), "bestfit") == [31.0, 6.0]


def test_gpu_packing_three_cases() -> None:
    engine = two_nodes("gpupacking")
    assert scores(engine, share(200), "gpupacking") == [25.0, 25.0]  # all idle: max(33 - 8, 8)
    engine.place(Request("x", 0, 0, DeviceRequest(count=1, core_permille=700, uuids=("a-gpu3",))))
    # a: best fit is the GPU with 300 free -> 100 - (300 * 100 // 1000) // 10 = 97
    assert scores(engine, share(200), "gpupacking") == [97.0, 25.0]
    # 500 does not fit the 300 left, so an idle GPU is taken: max(50 - 1, 33) = 49
    assert scores(engine, share(500), "gpupacking") == [49.0, 25.0]
    assert scores(engine, Request("c", 1000), "gpupacking") == [0.0, 0.0]  # CPU-only


def test_gpu_clustering_kinds_by_hand() -> None:
    nodes = [gpu_node(n, group_size=0) for n in ("a", "b", "c", "d")]
    engine = Engine(ClusterState(nodes), "gpuclustering")
    engine.place(Request("x", 0, 0, DeviceRequest(count=1, core_permille=300, uuids=("a-gpu0",))))
    engine.place(Request("y", 0, 0, DeviceRequest(count=1, uuids=("c-gpu0",))))
    engine.place(Request("z", 0, 0, DeviceRequest(count=1, core_permille=300, uuids=("d-gpu0",))))
    engine.place(Request("z", 0, 0, DeviceRequest(count=1, uuids=("d-gpu1",))))
    # a hosts only shares: 75 + 25 * 300 // 8000 = 75; b empty: 25; c only other kinds:
    # 0 + 25 * 1000 // 8000 = 3; d both: 50 + 25 * 1300 // 8000 = 54
    assert scores(engine, share(500), "gpuclustering") == [75.0, 25.0, 3.0, 54.0]


def test_random_picks_one_feasible_node_reproducibly() -> None:
    nodes = [gpu_node(f"n{i}", count=1, group_size=0) for i in range(10)]
    picks = []
    for _ in range(2):
        engine = Engine(ClusterState(nodes, seed=3), "random", seed=3)
        picks.append([engine.place(whole()).allocations[0].node for _ in range(5)])
    assert picks[0] == picks[1]
    assert len(set(picks[0])) == 5  # one card each: five different nodes


def test_fgd_takes_the_gpu_that_keeps_a_half_free_and_breaks_ties_low() -> None:
    workload = TargetWorkload((share(500, cpu=0),), (1.0,))
    engine = Engine(ClusterState([gpu_node("a", count=2, group_size=0)]), "fgd", workload=workload)
    first = engine.place(share(300, cpu=0)).allocations[0]
    # both GPUs leave fragmentation 0 (score 50): the lower index wins
    assert first.devices[0].uuid == "a-gpu0"
    # GPU0 would drop to 400 < 500 (fragment 400, score 40); GPU1 keeps 700 (score 50)
    second = engine.place(share(300, cpu=0)).allocations[0]
    assert second.devices[0].uuid == "a-gpu1"


def test_fgd_score_is_the_integer_sigmoid_of_the_fragment_change() -> None:
    workload = TargetWorkload((share(500, cpu=0),), (1.0,))
    engine = Engine(ClusterState([gpu_node("a", count=1, group_size=0)]), "fgd", workload=workload)
    # one GPU 1000 free -> 300 takes it to 700 (usable, fragment 0): sigmoid(0) = 0.5 -> 50
    assert scores(engine, share(300, cpu=0), "fgd") == [50.0]
    # 600 takes it to 400: fragment 400 -> floor(100 * sigmoid(-0.4)) = 40
    assert scores(engine, share(600, cpu=0), "fgd") == [40.0]
    assert np.floor(100 / (1 + np.exp(0.4))) == 40


def test_fgd_needs_a_workload() -> None:
    engine = Engine(ClusterState([gpu_node("a")]), "fgd")
    with pytest.raises(ValueError, match="target workload"):
        engine.place(share(300))
