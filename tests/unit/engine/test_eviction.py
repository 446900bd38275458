"""The one eviction-eligibility rule both fronts apply (engine/cycle/eviction.py)."""

from __future__ import annotations

from xpupool.engine.cycle.eviction import evictable_owners, may_evict, may_reclaim
from xpupool.model.allocation import Allocation


def alloc(id_: int, node: str, priority: int) -> Allocation:
    return Allocation(id_, "r", 0, node, 0, 0, 0, (), priority)


def test_only_strictly_lower_priority_and_not_already_leaving() -> None:
    assert may_evict(0, 1)
    assert not may_evict(1, 1)
    assert not may_evict(2, 1)
    assert not may_evict(0, 1, leaving=True)


def test_reclaim_takes_any_priority_from_the_borrowers_only() -> None:
    assert may_reclaim("b", {"b"})
    assert not may_reclaim("a", {"b"})
    assert not may_reclaim(None, {"b"})
    assert not may_reclaim("b", {"b"}, leaving=True)


def test_a_holder_goes_whole_and_its_highest_priority_counts() -> None:
    charges = {
        "low": [alloc(1, "n1", 0), alloc(2, "n2", 0)],
        "mixed": [alloc(3, "n1", 0), alloc(4, "n1", 5)],  # holds something of priority 5
        "empty": [],
    }
    assert evictable_owners(charges, 5) == {1: "low", 2: "low"}
    assert evictable_owners(charges, 6) == {1: "low", 2: "low", 3: "mixed", 4: "mixed"}
    assert evictable_owners(charges, 6, node="n2") == {1: "low", 2: "low"}
    assert evictable_owners(charges, 0) == {}
