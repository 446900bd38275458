"""Columnar state: layout, exact apply/revert, inventory changes that keep usage."""

from __future__ import annotations

import numpy as np
import pytest

from xpupool.engine import ClusterState
from xpupool.model import Conflict, DeviceRequest, NotFound, Request, RequestError

from factories import capacity_arrays, cpu_node, devices, engine_for, gpu_node


def test_grid_width_is_a_multiple_of_eight_and_counts_devices() -> None:
    state = ClusterState([gpu_node("a", count=8), gpu_node("b", count=12), cpu_node("c")])
    assert state.width == 16
    assert state.n_nodes == 3
    assert state.n_devices == 20
    assert state.dev_present.sum(axis=1).tolist() == [8, 12, 0]


def test_duplicate_node_name_is_rejected_with_field() -> None:
    with pytest.raises(RequestError) as exc:
        ClusterState([gpu_node("a"), gpu_node("a")])
    assert exc.value.field == "nodes.name"


def test_apply_then_revert_restores_every_array_bit_for_bit() -> None:
    engine = engine_for(gpu_node("a"), gpu_node("b"))
    state = engine.state
    before = capacity_arrays(state)
    placement = engine.place(devices(3, memory_permille=333, core_permille=250))
    assert placement.ok
    engine.release(placement.allocations[0])
    for name, array in before.items():
        assert np.array_equal(getattr(state, name), array), name


def test_double_release_is_a_conflict() -> None:
    engine = engine_for(gpu_node("a"))
    alloc = engine.place(devices(1)).allocations[0]
    engine.release(alloc)
    with pytest.raises(Conflict):
        engine.release(alloc)


def test_apply_refuses_an_over_commit_and_changes_nothing() -> None:
    engine = engine_for(gpu_node("a", count=1))
    alloc = engine.place(devices(1)).allocations[0]
    state = engine.state
    free = state.dev_mem_free.copy()
    from dataclasses import replace

    with pytest.raises(Conflict):
        state.apply(replace(alloc, id=999))
    assert np.array_equal(state.dev_mem_free, free)


def test_add_node_keeps_usage_cordons_and_tie_order() -> None:
    engine = engine_for(gpu_node("a", count=8), gpu_node("b", count=8), seed=3)
    state = engine.state
    alloc = engine.place(devices(2, memory_mib=1000)).allocations[0]
    state.set_node_schedulable("b", False)
    rank_before = state.rank.copy()
    state.add_node(gpu_node("c", count=16))  # widens the grid from 8 to 16 columns
    assert state.width == 16
    assert state.rank[:2].tolist() == rank_before.tolist()
    assert not state.node_schedulable[state.node_index["b"]]
    used = state.dev_mem_total.sum() - state.dev_mem_free.sum()
    assert used == 2000
    released = engine.release(alloc.id)  # slots were re-addressed for the wider grid
    assert all(state.slot_uuid[s.slot] == s.uuid for s in released.devices)
    assert state.dev_mem_free.sum() == state.dev_mem_total.sum()


def test_remove_node_refuses_while_allocations_remain() -> None:
    engine = engine_for(gpu_node("a"))
    alloc = engine.place(devices(1)).allocations[0]
    with pytest.raises(Conflict):
        engine.state.remove_node("a")
    engine.release(alloc)
    engine.state.remove_node("a")
    assert engine.explain(devices(1)) is not None


def test_unknown_node_and_device_are_not_found() -> None:
    state = ClusterState([gpu_node("a")])
    with pytest.raises(NotFound):
        state.set_node_schedulable("zz", False)
    with pytest.raises(NotFound):
        state.set_device_health("nope", False)


def test_inventory_changes_bump_the_epoch() -> None:
    state = ClusterState([gpu_node("a")])
    epoch = state.epoch
    state.set_device_cordoned("a-gpu0", True)
    assert state.epoch > epoch
    assert not state.dev_usable[0, 0]


def test_the_change_log_forgets_its_older_half_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    """``changed_since`` names every node changed since a change number it still holds, in order,
    across the log's wrap; a number it no longer holds gets None (its reader recomputes)."""
    from xpupool.engine import state as state_module

    monkeypatch.setattr(state_module, "CHANGE_LOG", 4)
    engine = engine_for(*[gpu_node(f"n{i}", count=2) for i in range(3)])
    state = engine.state
    start = state.change_seq
    touched: list[int] = []
    for i in range(11):
        result = engine.place(Request(f"r{i}", 100, 100, DeviceRequest(count=1, memory_mib=1)))
        touched.append(result.allocations[0].node_index)
        seq = start + len(touched)
        assert state.change_seq == seq
        since = state.changed_since(seq - 1)
        assert since is not None and since.tolist() == touched[-1:]
    assert state.changed_since(start) is None  # 11 changes: the log (2 x 4) forgot the first
    kept = state.changed_since(start + 7)
    assert kept is not None and kept.tolist() == touched[7:]
