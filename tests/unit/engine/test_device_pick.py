"""Device choice inside the node: binpack/spread on shares and on link groups."""

from __future__ import annotations

from dataclasses import replace

from xpupool.model import DevicePolicy, Topology

from factories import devices, engine_for, gpu_node


def uuids(placement):  # type: ignore[no-untyped-def]
    return [d.uuid for d in placement.allocations[0].devices]


def test_binpack_shares_the_busiest_card_and_spread_the_emptiest() -> None:
    engine = engine_for(gpu_node("a", count=4, group_size=0))
    engine.place(devices(1, memory_permille=250, uuids=("a-gpu2",)))
    assert uuids(engine.place(devices(1, memory_permille=250))) == ["a-gpu2"]
    spread = replace(devices(1, memory_permille=250), device_policy=DevicePolicy.SPREAD)
    assert uuids(engine.place(spread)) == ["a-gpu0"]


def test_whole_card_binpack_keeps_the_intact_link_group_whole() -> None:
    engine = engine_for(gpu_node("a", count=8, group_size=4))
    engine.place(devices(1, uuids=("a-gpu5",)))
    # Group link1 has 3 free cards, link0 has 4: binpack takes from link1.
    assert uuids(engine.place(devices(1))) == ["a-gpu4"]
    # A 4-card replica then still finds link0 whole.
    assert uuids(engine.place(devices(4, topology=Topology.SAME_LINK_GROUP))) == [
        "a-gpu0",
        "a-gpu1",
        "a-gpu2",
        "a-gpu3",
    ]


def test_multi_device_prefers_one_group_even_without_the_constraint() -> None:
    engine = engine_for(gpu_node("a", count=8, group_size=4))
    engine.place(devices(1, uuids=("a-gpu0",)))
    assert uuids(engine.place(devices(3))) == ["a-gpu1", "a-gpu2", "a-gpu3"]
