"""What a node's new inventory does to the allocations on it, decided before anything changes.

An agent re-registers when its devices change: a card fell off the bus, was pulled for repair, or
reports less memory. Allocations on it are live (their processes may be running), so the new
inventory cannot simply replace the old one: the engine would then hold work on a device it no
longer has, or more than a device can hold, and a restart would find the store inconsistent.
:func:`plan` compares the new inventory with the allocations held on the node. Nothing in the way:
the new inventory is served at once. Something in the way: the registration is refused (409,
naming each allocation and its job), or, when the agent asks for a drain, each device in the way
is kept as it was, cordoned, and replaced by its new form (or dropped) when its last allocation
ends; the node's CPU and memory likewise. Pure: no I/O, no state.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, replace

from xpupool.model.allocation import Allocation
from xpupool.model.device import Device, Node


@dataclass(frozen=True, slots=True)
class InventoryPlan:
    """``serve``: the node the engine schedules on now. ``target``: the registered node, when
    part of it waits for allocations to end (None: ``serve`` is what was registered).
    ``blocked``: one line per thing in the way, naming the allocations and jobs."""

    serve: Node
    target: Node | None
    blocked: tuple[str, ...]

    @property
    def draining(self) -> frozenset[str]:
        return draining(self.serve, self.target)


def draining(serve: Node, target: Node | None) -> frozenset[str]:
    """UUIDs served now that go (or change) once free: cordoned until then."""
    if target is None:
        return frozenset()
    wanted = {d.uuid: d for d in target.devices}
    return frozenset(d.uuid for d in serve.devices if wanted.get(d.uuid) != d)


def plan(current: Node | None, new: Node, held: Iterable[tuple[int, Allocation]]) -> InventoryPlan:
    """How to take ``new`` given ``current`` (None: a new node) and the allocations on the node
    as ``(job_id, allocation)``. A device is in the way when it is gone from ``new`` or has less
    memory than its allocations hold; the node when its CPU or memory is below theirs."""
    mem_used: dict[str, int] = defaultdict(int)
    holders: dict[str, list[str]] = defaultdict(list)
    cpu_used = ram_used = 0
    everyone: list[str] = []
    for job_id, alloc in held:
        who = f"allocation {alloc.id} (job {job_id})"
        everyone.append(who)
        cpu_used += alloc.cpu_milli
        ram_used += alloc.memory_mib
        for share in alloc.devices:
            mem_used[share.uuid] += share.memory_mib
            holders[share.uuid].append(who)
    old = {d.uuid: d for d in current.devices} if current is not None else {}
    new_by_uuid = {d.uuid: d for d in new.devices}
    keep: dict[str, Device] = {}
    blocked: list[str] = []
    for uuid, used in sorted(mem_used.items()):
        found = new_by_uuid.get(uuid)
        if found is not None and found.memory_mib >= used:
            continue
        what = "is gone" if found is None else f"shrinks to {found.memory_mib} MiB"
        blocked.append(
            f"device {uuid} {what}, but {used} MiB of it are held by {', '.join(holders[uuid])}"
        )
        if uuid in old:
            keep[uuid] = old[uuid]
    cpu, ram = new.cpu_milli, new.memory_mib
    if current is not None and (new.cpu_milli < cpu_used or new.memory_mib < ram_used):
        blocked.append(
            f"node {new.name} shrinks to {new.cpu_milli} millicores and {new.memory_mib} MiB, "
            f"but {cpu_used} millicores and {ram_used} MiB are held by {', '.join(everyone)}"
        )
        cpu, ram = max(cpu, current.cpu_milli), max(ram, current.memory_mib)
    if not blocked:
        return InventoryPlan(new, None, ())
    devices = [keep.get(d.uuid, d) for d in new.devices]
    devices += [d for uuid, d in keep.items() if uuid not in new_by_uuid]
    serve = replace(new, cpu_milli=cpu, memory_mib=ram, devices=tuple(devices))
    return InventoryPlan(serve, new, tuple(blocked))
