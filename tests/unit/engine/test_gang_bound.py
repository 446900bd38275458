"""A gang larger than the cluster could take is refused at once, naming how many would fit."""

from __future__ import annotations

import numpy as np

from xpupool.engine.gang_bound import gang_room
from xpupool.model import DeviceRequest, Request

from factories import engine_for, gpu_node


def test_a_gang_one_node_too_large_is_refused_before_placing_anything() -> None:
    engine = engine_for(*(gpu_node(f"n{i}", count=8) for i in range(3)))
    before = engine.state.dev_mem_free.copy()
    whole_nodes = Request("g", devices=DeviceRequest(count=8), replicas=4, gang=True)
    placement = engine.place(whole_nodes)
    assert not placement.ok and placement.allocations == ()
    failure = placement.failures[0]
    assert failure.replica == 3
    assert "gang: replica 4 of 4 fits nowhere; at most 3 fit at once" in failure.message
    assert sum(r.count for r in failure.reasons) == 3  # each node blamed once
    assert np.array_equal(engine.state.dev_mem_free, before) and engine.state.live == {}
    assert engine.place(Request("g", devices=DeviceRequest(count=8), replicas=3, gang=True)).ok


def test_the_bound_counts_shares_cpu_and_memory() -> None:
    engine = engine_for(gpu_node("a", count=2), gpu_node("b", count=1))
    quarter = Request("q", devices=DeviceRequest(count=1, memory_permille=250), replicas=99)
    assert gang_room(engine.pipeline, quarter).at_most == 12  # 3 cards x 4 quarters
    cpu_bound = Request("c", cpu_milli=int(engine.state.node_cpu_total.max()) // 2 + 1, replicas=9)
    assert gang_room(engine.pipeline, cpu_bound).at_most == 2  # one per node
