"""Scorers on hand-made nodes, with the expected scores worked out by hand."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from xpupool.engine import ClusterState, Engine, make_profile
from xpupool.engine.context import Context
from xpupool.engine.registry import SCORERS
from xpupool.engine.scorers.base import DevicePicker
from xpupool.engine.scorers.binpack import NodeBinpack
from xpupool.engine.scorers.random_pick import RandomPick
from xpupool.engine.scorers.spread import NodeSpread
from xpupool.engine.scorers.topology import Topology
from xpupool.engine.state import FloatArray
from xpupool.model import Request
from xpupool.model.request import DevicePolicy

from factories import cpu_node, devices, engine_for, gpu_node


def scored(engine, req, scorer):  # type: ignore[no-untyped-def]
    ctx = engine.feasible(req)
    return scorer.score(ctx)


def test_binpack_and_spread_after_placement_by_hand() -> None:
    # Node a: 2 cards x 1000 MiB, one card half used (memory and compute). Node b: empty.
    engine = engine_for(
        gpu_node("a", count=2, memory_mib=1000, group_size=0),
        gpu_node("b", count=2, memory_mib=1000, group_size=0),
    )
    engine.place(devices(1, core_permille=500, uuids=("a-gpu0",)))  # a slice: memory and compute
    req = devices(1, core_permille=250)  # 25 % compute and 250 MiB
    # a: memory (500 + 250) / 2000 = 0.375, compute (500 + 250) / 2000 = 0.375 -> 37.5
    # b: 250 / 2000 = 0.125 on both -> 12.5
    assert scored(engine, req, NodeBinpack()).tolist() == pytest.approx([37.5, 12.5])
    assert scored(engine, req, NodeSpread()).tolist() == pytest.approx([62.5, 87.5])


def test_binpack_cpu_only_uses_cpu_and_memory() -> None:
    engine = engine_for(cpu_node("c", cpu_milli=10_000, memory_mib=1000))
    req = Request("r", cpu_milli=5000, memory_mib=500)
    assert scored(engine, req, NodeBinpack()).tolist() == pytest.approx([50.0])


def test_topology_scores_share_of_the_largest_group() -> None:
    engine = engine_for(gpu_node("a", count=8, group_size=4), gpu_node("b", count=8, group_size=2))
    assert scored(engine, devices(4), Topology()).tolist() == pytest.approx([100.0, 50.0])
    ctx = engine.feasible(devices(1))
    assert Topology().score(ctx) is None  # no preference among nodes for one card: skipped


def test_random_is_reproducible_per_seed() -> None:
    engine = engine_for(*(gpu_node(f"n{i}") for i in range(20)))
    one = scored(engine, devices(1), RandomPick(5))
    two = scored(engine, devices(1), RandomPick(5))
    assert np.array_equal(one, two)
    assert one.min() >= 0 and one.max() <= 100


def test_binpack_engine_prefers_the_fuller_node_and_spread_the_emptier() -> None:
    nodes = [gpu_node("a", count=2, group_size=0), gpu_node("b", count=2, group_size=0)]
    for profile, expected in (("binpack", "a"), ("spread", "b")):
        engine = engine_for(*nodes, profile=profile)
        engine.place(devices(1, uuids=("a-gpu0",)))
        assert engine.place(devices(1)).allocations[0].node == expected


def test_ties_go_to_the_lowest_rank_of_the_seeded_order() -> None:
    nodes = [gpu_node(f"n{i}", count=1, group_size=0) for i in range(10)]
    for seed in range(3):
        engine = engine_for(*nodes, seed=seed)
        expected = engine.state.node_names[int(np.argmin(engine.state.rank))]
        assert engine.place(devices(1)).allocations[0].node == expected


class _LastCard:
    """A scorer that is also a device picker: every node 0, the last fitting card."""

    name = "last-card"

    def score(self, ctx: Context) -> FloatArray:
        return np.zeros(ctx.state.n_nodes)

    def pick(self, ctx: Context, node: int) -> list[int] | None:
        assert ctx.dev_fit is not None
        return [int(np.flatnonzero(ctx.dev_fit[node])[-1])]


def test_device_picker_is_declared_and_used(monkeypatch: pytest.MonkeyPatch) -> None:
    assert isinstance(_LastCard(), DevicePicker)
    assert isinstance(RandomPick(0), DevicePicker)
    assert not isinstance(NodeBinpack(), DevicePicker)
    monkeypatch.setitem(SCORERS, "last-card", lambda env: _LastCard())
    engine = Engine(ClusterState([gpu_node("a", count=4)]), make_profile("p", {"last-card": 1}))
    assert engine.place(devices(1)).allocations[0].devices[0].uuid == "a-gpu3"
    # A request that names its device policy keeps it.
    req = replace(devices(1, core_permille=500), device_policy=DevicePolicy.BINPACK)
    assert engine.place(req).allocations[0].devices[0].uuid == "a-gpu0"
