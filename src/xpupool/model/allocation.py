"""What the engine handed out: enough to release exactly what was taken.

Amounts are absolute (MiB, thousandths of a device) even when the request said ``50%``, because a
percentage resolves differently on each card size; release subtracts the same integers it added.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class DeviceShare:
    """One device's part of an allocation. ``slot`` is the device's column in the engine state."""

    uuid: str
    slot: int
    memory_mib: int
    core_permille: int


@dataclass(frozen=True, slots=True)
class Allocation:
    """One replica placed on one node. ``id`` is unique per engine: release checks it.
    ``priority`` is the request's, kept so preemption can tell who may be evicted; ``guaranteed``
    says the request's QoS class is guaranteed (``model/qos.py``): it is never evicted for
    priority."""

    id: int
    request_name: str
    replica: int
    node: str
    node_index: int
    cpu_milli: int
    memory_mib: int
    devices: tuple[DeviceShare, ...]
    priority: int = 0
    guaranteed: bool = False

    @property
    def device_uuids(self) -> tuple[str, ...]:
        return tuple(d.uuid for d in self.devices)
