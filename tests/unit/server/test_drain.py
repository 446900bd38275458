"""``server/drain.py``: what a node's new inventory does to the allocations on it, decided before
anything changes (pure: nodes and allocations in, a plan out)."""

from __future__ import annotations

from dataclasses import replace

from xpupool.model.allocation import Allocation, DeviceShare
from xpupool.model.device import Device, Node
from xpupool.server.drain import plan


def card(uuid: str, memory_mib: int = 81920) -> Device:
    return Device(uuid=uuid, vendor="nvidia", model="NVIDIA A100-SXM4-80GB", memory_mib=memory_mib)


def box(*devices: Device, cpu_milli: int = 64_000, memory_mib: int = 1 << 18) -> Node:
    return Node("box", cpu_milli, memory_mib, devices=devices)


def holding(alloc_id: int, uuid: str, memory_mib: int, cpu_milli: int = 1000) -> Allocation:
    return Allocation(
        alloc_id, "job", 0, "box", 0, cpu_milli, 1024, (DeviceShare(uuid, 0, memory_mib, 500),)
    )


def test_a_change_nothing_holds_is_served_at_once() -> None:
    old = box(card("g0"), card("g1"))
    new = box(card("g0", 40960), card("g2"))  # g1 gone, g0 smaller, g2 new: none of it held
    step = plan(old, new, [])
    assert step.serve == new and step.target is None and not step.blocked
    assert plan(None, new, []).serve == new  # a new node


def test_a_held_card_that_goes_is_kept_cordoned_until_free() -> None:
    old = box(card("g0"), card("g1"))
    new = box(card("g0"))
    step = plan(old, new, [(7, holding(3, "g1", 20480))])
    assert step.blocked == (
        "device g1 is gone, but 20480 MiB of it are held by allocation 3 (job 7)",
    )
    assert [d.uuid for d in step.serve.devices] == ["g0", "g1"]
    assert step.target == new and step.draining == {"g1"}
    # once the allocation ends, the same plan serves what was registered
    assert plan(step.serve, new, []).serve == new


def test_a_held_card_shrinking_below_its_allocations_keeps_its_old_size() -> None:
    old = box(card("g0"))
    smaller = box(card("g0", 40960))
    held = [(7, holding(3, "g0", 30720)), (8, holding(4, "g0", 20480))]
    step = plan(old, smaller, held)
    assert step.blocked and "allocation 3 (job 7), allocation 4 (job 8)" in step.blocked[0]
    assert step.serve.devices[0].memory_mib == 81920 and step.draining == {"g0"}
    # still room for what is held: shrinking is no problem
    assert not plan(old, box(card("g0", 61440)), held).blocked


def test_a_node_shrinking_below_its_allocations_keeps_its_cpu_and_memory() -> None:
    old = box(card("g0"), cpu_milli=64_000)
    new = replace(old, cpu_milli=2000)
    step = plan(old, new, [(7, holding(3, "g0", 1024, cpu_milli=4000))])
    assert step.blocked and step.blocked[0].startswith("node box shrinks to 2000 millicores")
    assert step.serve.cpu_milli == 64_000 and step.target == new
    assert not step.draining  # no device changes: the node only waits for its CPU
