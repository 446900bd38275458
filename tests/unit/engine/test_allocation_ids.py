"""One allocation id counter outlives the engines built over it (issue 43, item 3): a front that
rebuilds its engine (a node registers, the server restarts) hands the same counter to the new
one, and no id is handed out twice, even when every earlier allocation was released. Before,
each engine numbered from 1."""

from __future__ import annotations

import pytest

from xpupool.engine import AllocationIds, ClusterState, Engine, Transaction

from factories import devices, gpu_node


def _engine(ids: AllocationIds, *names: str) -> Engine:
    return Engine(ClusterState([gpu_node(n, count=2) for n in names]), "binpack", ids=ids)


def test_a_rebuilt_engine_goes_on_from_the_counter_after_everything_was_released() -> None:
    ids = AllocationIds()
    first = _engine(ids, "a")
    placed = first.place(devices(1)).allocations[0]
    first.release(placed)  # nothing held any more: nothing left to restore
    rebuilt = _engine(ids, "a", "b")  # a node registered
    assert rebuilt.place(devices(1)).allocations[0].id == placed.id + 1


def test_the_stored_mark_and_restored_allocations_raise_it() -> None:
    ids = AllocationIds()
    ids.seen(41)  # a store's mark: ids up to 41 were handed out before a restart
    engine = _engine(ids, "a")
    held = engine.place(devices(1)).allocations[0]
    assert held.id == 42
    again = _engine(AllocationIds(), "a")
    again.restore(held)  # a front with no mark restores what is held
    assert again.place(devices(1)).allocations[0].id == 43


def test_ids_of_a_rolled_back_what_if_are_not_handed_out_again() -> None:
    ids = AllocationIds()
    engine = _engine(ids, "a")
    with Transaction(engine.state) as txn:
        what_if = engine.place(devices(1), txn=txn).allocations[0]
        txn.rollback()
    assert engine.place(devices(1)).allocations[0].id == what_if.id + 1


def test_ids_start_at_one_or_above() -> None:
    with pytest.raises(ValueError, match="start at 1"):
        AllocationIds(0)
