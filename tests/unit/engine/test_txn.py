"""Transactions: every change inside one is undone exactly, nested ones hand their record up."""

from __future__ import annotations

import numpy as np
import pytest

from xpupool.engine import ClusterState, Engine, Transaction
from xpupool.model import DeviceRequest, Request

from factories import engine_for, gpu_node

ARRAYS = ("node_cpu_free", "node_mem_free", "dev_mem_free", "dev_core_free")


def snapshot(state: ClusterState) -> tuple[dict[str, bytes], tuple[int, ...]]:
    return {name: np.asarray(getattr(state, name)).tobytes() for name in ARRAYS}, tuple(
        sorted(state.live)
    )


def share(name: str, core: int = 250) -> Request:
    return Request(name, 1000, 1024, DeviceRequest(count=1, core_permille=core))


def busy_engine() -> Engine:
    engine = engine_for(gpu_node("a", count=2), gpu_node("b", count=2))
    for i in range(5):
        assert engine.place(share(f"r{i}")).ok
    return engine


def test_rollback_undoes_applies_and_releases_in_any_mix() -> None:
    engine = busy_engine()
    before = snapshot(engine.state)
    live = sorted(engine.state.live)
    with Transaction(engine.state) as txn:
        txn.release(live[0])
        placed = engine.place(share("x", 500), txn=txn)
        assert placed.ok
        txn.release(live[2])
        assert snapshot(engine.state) != before
    assert snapshot(engine.state) == before


def test_a_nested_commit_hands_its_record_to_the_parent() -> None:
    engine = busy_engine()
    before = snapshot(engine.state)
    with Transaction(engine.state) as outer:
        with Transaction(engine.state, parent=outer) as inner:
            inner.release(sorted(engine.state.live)[1])
            inner.commit()
        placement = engine.place(share("y"), txn=outer)
        assert placement.allocations[0].id in engine.state.live
        assert outer.allocations == placement.allocations
        outer.rollback()
    assert snapshot(engine.state) == before


def test_a_committed_top_level_transaction_keeps_its_changes() -> None:
    engine = busy_engine()
    alloc_id = sorted(engine.state.live)[0]
    with Transaction(engine.state) as txn:
        txn.release(alloc_id)
        txn.commit()
    assert alloc_id not in engine.state.live
    with pytest.raises(RuntimeError, match="closed"):
        txn.release(sorted(engine.state.live)[0])


def test_a_nested_transaction_must_share_its_parents_state() -> None:
    one, other = busy_engine(), busy_engine()
    with Transaction(one.state) as outer, pytest.raises(ValueError, match="parent's state"):
        Transaction(other.state, parent=outer)


def test_commit_actions_run_once_the_outermost_transaction_commits_and_never_on_a_rollback() -> (
    None
):
    engine = busy_engine()
    ran: list[str] = []
    with Transaction(engine.state) as outer:
        with Transaction(engine.state, parent=outer) as inner:
            inner.on_commit(lambda: ran.append("inner"))
            inner.commit()
        assert ran == []  # handed to the parent, not run yet
        outer.on_commit(lambda: ran.append("outer"))
        outer.commit()
    assert ran == ["inner", "outer"]
    ran.clear()
    with Transaction(engine.state) as outer:
        with Transaction(engine.state, parent=outer) as inner:
            inner.on_commit(lambda: ran.append("inner"))
            inner.commit()
        outer.rollback()
    with Transaction(engine.state) as txn:
        txn.on_commit(lambda: ran.append("left"))  # leaving the block rolls back
    assert ran == []


def test_a_placement_inside_a_transaction_teaches_the_learners_only_when_it_commits() -> None:
    """The Kubernetes extender places every pod inside a transaction; before, the engine told its
    learners of no placement made in one, so the extender's online workload stayed empty."""
    engine = engine_for(gpu_node("a", count=2), gpu_node("b", count=2), profile="xpupool")
    assert engine.stranded() is None  # nothing learned yet
    with Transaction(engine.state) as trial:
        assert engine.place(share("what-if"), txn=trial).ok
        trial.rollback()
    assert engine.stranded() is None  # a what-if teaches nothing
    with Transaction(engine.state) as txn:
        assert engine.place(share("kept"), txn=txn).ok
        assert engine.stranded() is None  # not before the commit
        txn.commit()
    assert engine.stranded() is not None  # learned: one shape, a quarter of a card's compute
