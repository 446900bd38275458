"""The engine host (engine/host.py): one engine over a changing pool, for every front.

What each front once did its own way: rebuild from node records, re-apply what is held oldest
first, re-address allocations strictly, carry learning and the allocation ids across rebuilds, and
judge "never fits" with the profile's disabled filters (issue 44, item 1).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from xpupool.catalog.power import PowerModel
from xpupool.engine.host import EngineHost, HostedNode
from xpupool.engine.profile import BUILTIN_PROFILES, DEFAULT_PROFILE
from xpupool.model.allocation import Allocation, DeviceShare
from xpupool.model.errors import Conflict

from factories import devices, gpu_node


def alloc(alloc_id: int, node: str, *uuids: str, memory_mib: int = 81920) -> Allocation:
    """An allocation as a store or a pod keeps it: slots and node index not known."""
    shares = tuple(DeviceShare(u, -1, memory_mib, 1000) for u in uuids)
    return Allocation(alloc_id, f"r{alloc_id}", 0, node, -1, 0, 0, shares)


def two_nodes() -> list[HostedNode]:
    return [HostedNode(gpu_node("a", count=2)), HostedNode(gpu_node("b", count=2))]


def test_readdress_fixes_slots_and_refuses_what_is_not_the_nodes() -> None:
    host = EngineHost()
    engine = host.fresh(two_nodes())
    state = engine.state
    got = state.readdress(alloc(1, "b", "b-gpu1"))
    assert got.node_index == state.node_index["b"]
    assert got.devices[0].slot == state.uuid_slot["b-gpu1"]
    with pytest.raises(Conflict, match="node gone is not in the pool"):
        state.readdress(alloc(2, "gone", "a-gpu0"))
    with pytest.raises(Conflict, match="device x-gpu0 is not in the pool"):
        state.readdress(alloc(3, "a", "x-gpu0"))
    with pytest.raises(Conflict, match="device b-gpu0 is node b's, not a's"):
        state.readdress(alloc(4, "a", "b-gpu0"))
    state.remove_node("b")
    with pytest.raises(Conflict, match="node b is not in the pool"):
        state.readdress(alloc(5, "b", "b-gpu1"))


def test_reapply_goes_oldest_first_and_applies_a_charge_whole_or_not_at_all() -> None:
    host = EngineHost()
    engine = host.fresh(two_nodes())
    charges = [
        ("newer", (alloc(7, "a", "a-gpu0"),)),
        ("older", (alloc(3, "a", "a-gpu0"),)),  # claims the same card: placed first, keeps it
        ("half", (alloc(5, "b", "b-gpu0"), alloc(6, "b", "b-gpu0"))),  # its second over-commits
        ("elsewhere", (alloc(8, "a", "b-gpu1"),)),
    ]
    done = host.reapply(engine, charges)
    assert set(done.kept) == {"older"}
    assert [r.owner for r in done.refused] == ["half", "newer", "elsewhere"]
    assert done.refused[2].allocations == charges[3][1]  # as given
    assert set(engine.state.live) == {3}  # the half-applied charge gave its first back
    assert done.kept["older"][0].devices[0].slot == engine.state.uuid_slot["a-gpu0"]


def test_a_rebuild_goes_on_with_the_pools_ids_and_keeps_cordons() -> None:
    host = EngineHost()
    host.rebuild(two_nodes(), [("p", (alloc(41, "a", "a-gpu0"),))])
    first = host.engine
    assert first is not None and host.ids.next == 42
    nodes = [
        HostedNode(gpu_node("a", count=2), schedulable=False),
        HostedNode(gpu_node("b", count=2), cordoned=frozenset({"b-gpu1", "not-a-card"})),
    ]
    host.rebuild(nodes, [])
    second = host.engine
    assert second is not None and second is not first and host.rebuilds == 2
    assert second.ids is first.ids  # one counter: the next id is above every id before
    state = second.state
    assert not state.node_schedulable[state.node_index["a"]]
    assert state.dev_cordoned.reshape(-1)[state.uuid_slot["b-gpu1"]]
    placed = second.place(devices(1))
    assert placed.ok and placed.allocations[0].id == 42
    assert placed.allocations[0].devices[0].uuid == "b-gpu0"


def test_learning_is_deferred_and_carried_across_rebuilds() -> None:
    host = EngineHost(defer_learning=True)
    host.rebuild(two_nodes(), [])
    first = host.engine
    assert first is not None and first._learning_deferred
    first.place(devices(1))
    host.rebuild(two_nodes(), [])
    assert host.engine is not None and host.engine._learning_deferred
    assert host.engine._inherited  # the workload seen so far goes on


def test_never_fits_reads_the_profiles_disabled_filters() -> None:
    asks_unknown_card = replace(devices(1), devices=replace(devices(1).devices, uuids=("x",)))
    plain = EngineHost()
    plain.rebuild(two_nodes(), [])
    assert plain.verdicts.never_fits(asks_unknown_card) is not None
    no_uuid = replace(
        BUILTIN_PROFILES[DEFAULT_PROFILE],
        name="no-uuid",
        disabled_filters=frozenset({"DeviceUuid"}),
    )
    host = EngineHost(no_uuid)
    host.rebuild(two_nodes(), [])
    assert host.verdicts.never_fits(asks_unknown_card) is None
    verdicts = host.verdicts
    host.rebuild(two_nodes(), [])
    assert host.verdicts is not verdicts  # judged on the engine served


def test_the_fronts_power_model_reaches_the_engine_served_and_those_built_after() -> None:
    host = EngineHost()
    host.install(host.fresh(two_nodes()))
    assert host.engine is not None and host.engine.power is None  # the catalog's figures
    power = PowerModel()
    host.use_power(power)
    assert host.engine.power is power
    host.rebuild(two_nodes(), [])
    assert host.engine.power is power
