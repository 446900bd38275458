"""MIG instances of one NVIDIA card through NVML, each reported as a device of its own.

A card in MIG mode runs work only in its instances, so the probe reports the instances in its
place (``DeviceInfo.partition``): each MIG device's UUID (``MIG-...``, what
``CUDA_VISIBLE_DEVICES`` takes), its memory, and the GPU instance it belongs to, whose placement
(``nvmlGpuInstanceGetInfo``: first memory slice and slice count) and GPU slice count
(``nvmlDeviceGetAttributes``: ``gpuInstanceSliceCount``) name its profile by the catalog's
geometry (``catalog/partitions.py``). NVML calls used, from its "Multi Instance GPU Management"
API: ``nvmlDeviceGetMaxMigDeviceCount``, ``nvmlDeviceGetMigDeviceHandleByIndex`` (an index with
no MIG device answers NVML_ERROR_NOT_FOUND), ``nvmlDeviceGetGpuInstanceId``,
``nvmlDeviceGetComputeInstanceId``, ``nvmlDeviceGetGpuInstanceById``. Two limits of these calls:
a ``+me`` profile has the same slices as its plain twin and reads as the plain one; a compute
instance smaller than its GPU instance reads as ``<c>c.<profile>`` (``1c.3g.40gb``), a profile no
request names, so it is reported but not placed on.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from xpupool.catalog import load_accelerators
from xpupool.catalog.partitions import PartitionScheme, load_partitions
from xpupool.probes.base import DeviceInfo

MIB = 1024 * 1024


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def mig_instances(
    nvml: Any, handle: object, card: DeviceInfo, skipped: list[str]
) -> tuple[DeviceInfo, ...] | None:
    """The MIG devices cut on ``card`` (read through ``handle``), in NVML's index order; None
    when NVML cannot list them here (an old library, no permission: the reason goes to
    ``skipped``), so the caller reports the card as before."""
    try:
        most = int(nvml.nvmlDeviceGetMaxMigDeviceCount(handle))
    except Exception as exc:
        skipped.append(f"{card.uuid} MIG devices: {exc}")
        return None
    scheme = load_partitions().scheme_for(card.model, card.vendor, load_accelerators())
    found: list[DeviceInfo] = []
    for index in range(most):
        try:
            mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, index)
        except Exception:
            continue  # NVML_ERROR_NOT_FOUND: no MIG device at this index
        try:
            found.append(_instance(nvml, handle, mig, card, scheme))
        except Exception as exc:
            skipped.append(f"{card.uuid} MIG device {index}: {exc}")
    return tuple(found)


def _instance(
    nvml: Any, handle: object, mig: object, card: DeviceInfo, scheme: PartitionScheme | None
) -> DeviceInfo:
    uuid = _text(nvml.nvmlDeviceGetUUID(mig))
    memory = nvml.nvmlDeviceGetMemoryInfo(mig)
    attributes = nvml.nvmlDeviceGetAttributes(mig)
    gpu_instance = nvml.nvmlDeviceGetGpuInstanceById(handle, nvml.nvmlDeviceGetGpuInstanceId(mig))
    placement = nvml.nvmlGpuInstanceGetInfo(gpu_instance).placement
    total_mib = int(memory.total) // MIB
    name = profile_name(
        scheme,
        int(attributes.gpuInstanceSliceCount),
        int(attributes.computeInstanceSliceCount),
        int(placement.size),
        total_mib,
    )
    return replace(
        card,
        uuid=uuid,
        memory_total_mib=total_mib,
        memory_used_mib=int(memory.used) // MIB,
        compute_units=int(attributes.multiprocessorCount),
        utilization_pct=None,  # NVML reports no utilisation per MIG device
        power_watts=None,
        temperature_c=None,
        peers=(),
        link_group=None,
        mig_mode=None,
        partition=name,
        partition_of=card.uuid,
        partition_start=int(placement.start),
    )


def profile_name(
    scheme: PartitionScheme | None,
    gpu_slices: int,
    compute_slices: int,
    memory_slices: int,
    mib: int,
) -> str:
    """The profile of a GPU instance of ``gpu_slices`` GPU slices over ``memory_slices`` memory
    slices: the catalog's (never a ``+me`` one: the slices cannot tell it apart), else
    ``<g>g.<GiB>gb`` from its memory; prefixed ``<c>c.`` when its compute instance is smaller."""
    name = f"{gpu_slices}g.{round(mib / 1024)}gb"
    for profile in scheme.profiles if scheme is not None else ():
        same = (profile.compute, profile.memory_slices) == (gpu_slices, memory_slices)
        if same and not profile.media:
            name = profile.name
            break
    return name if compute_slices >= gpu_slices else f"{compute_slices}c.{name}"
