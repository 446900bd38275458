"""Fragmentation of hand-made nodes against a hand-made target workload."""

from __future__ import annotations

import numpy as np
import pytest

from xpupool.engine import ClusterState, Engine
from xpupool.engine.fragmentation import FragmentationCache, TargetWorkload
from xpupool.model import DeviceRequest, Request

from factories import T4, gpu_node


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
