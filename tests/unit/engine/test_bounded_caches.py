"""Every keyed cache of the engine keeps to its bound under a long stream of distinct keys, and
lives on its owner (the pipeline, the FGD scorer, the software filter), not in a module."""

from __future__ import annotations

import numpy as np
import pytest

from xpupool.engine import ClusterState, Engine
from xpupool.engine.filters.software import Software
from xpupool.engine.fragmentation import TargetWorkload
from xpupool.engine.lru import Lru
from xpupool.engine.registry import STATIC_DEVICE_FILTERS
from xpupool.model import DeviceRequest, Request, parse_software_need

from factories import gpu_node


def test_lru_drops_the_least_recently_used() -> None:
    cache: Lru[int, str] = Lru(2)
    cache.put(1, "a")
    cache.put(2, "b")
    assert cache.get(1) == "a"  # 2 is now the least recently used
    cache.put(3, "c")
    assert cache.get(2) is None and cache.get(1) == "a" and cache.get(3) == "c"
    assert len(cache) == 2
    with pytest.raises(ValueError, match="at least one"):
        Lru(0)


def _engine(profile: str = "binpack") -> Engine:
    nodes = [gpu_node(f"n{i}", count=4, group_size=0) for i in range(4)]
    shapes = [Request("s", 1000, 0, DeviceRequest(count=1, core_permille=500))]
    workload = TargetWorkload.from_requests(shapes)
    return Engine(ClusterState(nodes), profile, workload=workload)


def test_pipeline_caches_stay_at_their_bounds() -> None:
    engine = _engine()
    pipeline = engine.pipeline
    for i in range(pipeline.eligible_cache.bound + 50):
        # distinct selectors and distinct memory shares: one new key each
        req = Request(
            f"r{i}",
            devices=DeviceRequest(count=1, exclude_uuids=(f"x{i}",), memory_permille=1 + i % 999),
        )
        engine.feasible(req)
    assert len(pipeline.eligible_cache) == pipeline.eligible_cache.bound
    assert len(pipeline.shares_cache) <= pipeline.shares_cache.bound


@pytest.mark.slow
def test_fgd_amounts_cache_stays_at_its_bound() -> None:
    engine = _engine("fgd")
    scorer = engine._weighted(engine.profile)[0][0]
    cache = scorer.after.cache  # type: ignore[attr-defined]
    for i in range(cache.bound + 20):
        req = Request(f"r{i}", cpu_milli=1 + i, devices=DeviceRequest(count=1, core_permille=100))
        ctx = engine.feasible(req)
        scorer.score(ctx)
    assert len(cache) == cache.bound


@pytest.mark.slow
def test_software_verdicts_live_on_the_filter_and_stay_bounded() -> None:
    software = next(f for f in STATIC_DEVICE_FILTERS if isinstance(f, Software))
    state = ClusterState([gpu_node("a", count=2)])
    bound = software.verdicts_bound
    for i in range(bound + 30):
        need = parse_software_need(f"torch>={i}.0")
        software.device_mask(
            Request("r", devices=DeviceRequest(count=1, software=(need,))), state, None
        )  # type: ignore[arg-type]
    assert software.cached_verdicts(state) == bound
    assert np.all(software.need_verdicts(state, parse_software_need("cuda>=12.1")) <= 4)
