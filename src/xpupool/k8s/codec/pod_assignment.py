"""The pod annotations a bind writes: HAMi's, per device type, so that HAMi's device plugin and
in-container limiter take the shares xpupool chose, and so that any scheduler (a restarted
extender, HAMi's own) charges the pod to them from its ``allocated`` annotation. A hardware
partition is written as HAMi reserves one (``hami_partitions.py``): the card it is cut from in the
device list, and the instance in ``hami.io/vgpu-mig-allocations`` (MIG) or the template in
``huawei.com/<CommonWord>`` (Ascend vNPU), which HAMi's device plugins cut."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

from xpupool.catalog import load_accelerators, load_partitions
from xpupool.engine.hami_mig import hami_cores
from xpupool.k8s.codec import hami
from xpupool.k8s.codec.hami_partitions import (
    MIG_ALLOCATIONS,
    MigAllocation,
    VnpuRuntime,
    encode_mig_allocations,
    encode_vnpu_runtime,
    vnpu_runtime_key,
)
from xpupool.k8s.codec.pod_request import PodDemand
from xpupool.k8s.codec.resource_names import DeviceKind
from xpupool.model.allocation import Allocation
from xpupool.model.device import Device


def assignment_annotations(
    node: str,
    demand: PodDemand,
    allocations: Sequence[Allocation],
    now_unix: int | None = None,
    devices: Mapping[str, Device] | None = None,
) -> dict[str, str]:
    """``allocations`` (one per container of ``demand.demands``, in that order) as HAMi's
    annotations: for each device type the pod asks for, one entry per container of the pod
    (HAMi's order, init containers first), empty for containers that ask for none of it.
    ``devices``: the node's devices by UUID; an allocated one that is a partition is written as
    HAMi's partition annotations (without it, every device is written as a card)."""
    if len(allocations) != len(demand.demands):
        raise ValueError(f"{len(allocations)} allocations for {len(demand.demands)} containers")
    now = int(time.time()) if now_unix is None else now_unix
    known = devices or {}
    out: dict[str, str] = {}
    kinds = {d.kind.hami_type: d.kind for d in demand.demands}
    mig: list[MigAllocation] = []
    for kind in kinds.values():
        containers: list[list[hami.ContainerDevice]] = [[] for _ in demand.containers]
        vnpus: list[VnpuRuntime] = []
        for d, alloc in zip(demand.demands, allocations, strict=True):
            if d.kind is not kind:
                continue
            for j, share in enumerate(alloc.devices):
                part = known.get(share.uuid)
                if part is None or part.partition is None or part.partition_of is None:
                    containers[d.index].append(hami.container_device(share, kind))
                    continue
                entry, reserved = _partition_entry(kind, part, d.index, j)
                containers[d.index].append(entry)
                if isinstance(reserved, MigAllocation):
                    mig.append(reserved)
                else:
                    vnpus.append(reserved)
        out.update(hami.assignment_annotations(kind, containers, node, now))
        if vnpus:
            out[vnpu_runtime_key(kind.hami_type)] = encode_vnpu_runtime(vnpus)
    encoded = encode_mig_allocations(mig)
    if encoded is not None:
        out[MIG_ALLOCATIONS] = encoded
    return out


def _partition_entry(
    kind: DeviceKind, part: Device, container: int, index: int
) -> tuple[hami.ContainerDevice, MigAllocation | VnpuRuntime]:
    """A partition as HAMi writes it: the card's UUID with the profile's memory and cores in the
    device list (nvidia/device.go ``AddResourceUsage``; Ascend: the template's memory, no cores
    on a hard split), and the instance HAMi's device plugin cuts."""
    assert part.partition is not None and part.partition_of is not None
    scheme = load_partitions().scheme_for(part.model, part.vendor, load_accelerators())
    profile = None if scheme is None else scheme.profile(part.partition)
    if scheme is None or profile is None:
        raise ValueError(f"{part.uuid}: {part.model} has no partition profile {part.partition}")
    card = part.partition_of
    if scheme.positional:
        assert part.partition_start is not None
        cores = hami_cores(scheme, profile)
        entry = hami.ContainerDevice(card, kind.hami_type, profile.memory_mib, cores)
        start, size = part.partition_start, profile.memory_slices
        return entry, MigAllocation(container, index, card, profile.name, start, size)
    entry = hami.ContainerDevice(card, kind.hami_type, profile.memory_mib, 0)
    return entry, VnpuRuntime(card, profile.name, profile.memory_mib)
