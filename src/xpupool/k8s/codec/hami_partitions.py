"""HAMi's pod annotations for hardware partitions, both directions, and the resource names its
examples ask for partitions with.

Written from HAMi commit 4707fb02c91c545bc7343ce26dba4c32919f9a3e (v2.10):

- ``hami.io/vgpu-mig-allocations`` (pkg/device/nvidia/mig_allocations.go ``MigAllocation``,
  ``EncodeMigAllocations``, ``DecodeMigAllocations``): the exact MIG instance the scheduler
  reserved per container device (GPU UUID, profile, placement start and size in memory slices),
  which the device plugin creates (``migmgr.go`` ``EnsureAllocation``) and fills in with its
  MIG UUID and GPU/compute instance ids. Written beside ``hami.io/vgpu-devices-to-allocate``
  (``device.go`` ``PatchAnnotations``), whose entry for the instance names the card with the
  profile's memory and cores (``AddResourceUsage``).
- ``huawei.com/<CommonWord>`` (pkg/device/ascend/device.go ``PatchAnnotations``,
  ``RuntimeInfo``): per allocated Ascend device its UUID, the vNPU template (``temp``: the
  smallest configured template whose memory holds the share, ``trimMemory``), memory and cores,
  read by the Ascend device plugin to cut the vNPU.
- ``nvidia.com/mig-<profile>`` (examples/nvidia/mig_example.yaml; the device plugin's name for a
  static MIG profile, ``rm.go``: ``"mig-" + profile`` with ``+`` written ``.``).

Decoding mirrors Go's (keys case-insensitive, unknown keys ignored) and refuses what HAMi's
decoder refuses, each problem a :class:`~xpupool.k8s.codec.hami.HamiAnnotationError` naming the
annotation, the entry and the field.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from xpupool.catalog.partition_cards import instance_uuid
from xpupool.catalog.partitions import PartitionScheme
from xpupool.k8s.codec.go_json import go_json
from xpupool.k8s.codec.hami import (
    MAX_ANNOTATION_CHARS,
    MAX_ENTRIES,
    HamiAnnotationError,
    field_at,
    go_fields,
    json_int,
    json_text,
)

MIG_ALLOCATIONS = "hami.io/vgpu-mig-allocations"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
_UINT32 = (1 << 32) - 1
_INT_MAX = (1 << 63) - 1
_MAX_TEXT = 512


@dataclass(frozen=True, slots=True)
class MigAllocation:
    """One reserved MIG instance: HAMi's ``MigAllocation``. ``start``/``size``: its placement in
    memory slices. The runtime identity (``mig_uuid``, GPU and compute instance ids) is filled in
    by the device plugin, all three or none."""

    container_index: int
    device_index: int
    gpu_uuid: str
    profile: str
    start: int
    size: int
    mig_uuid: str = ""
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None


def encode_mig_allocations(allocations: Sequence[MigAllocation]) -> str | None:
    """``EncodeMigAllocations``: the JSON array, fields in the Go struct's order, the runtime
    fields left out when unset; None when there is none (HAMi then writes no annotation)."""
    if not allocations:
        return None
    rows: list[dict[str, object]] = []
    for a in allocations:
        row: dict[str, object] = {
            "containerIndex": a.container_index,
            "deviceIndex": a.device_index,
            "gpuUUID": a.gpu_uuid,
            "profile": a.profile,
            "placement": {"start": a.start, "size": a.size},
        }
        if a.mig_uuid:
            row["migUUID"] = a.mig_uuid
        if a.gpu_instance_id is not None:
            row["gpuInstanceID"] = a.gpu_instance_id
        if a.compute_instance_id is not None:
            row["computeInstanceID"] = a.compute_instance_id
        rows.append(row)
    return go_json(rows)


_ALLOCATION_KEYS = (
    "containerIndex",
    "deviceIndex",
    "gpuUUID",
    "profile",
    "placement",
    "migUUID",
    "gpuInstanceID",
    "computeInstanceID",
)


def decode_mig_allocations(value: object) -> tuple[MigAllocation, ...]:
    """``DecodeMigAllocations``: empty text is none; an entry without a container or device
    index, GPU UUID, profile or placement size is incomplete, its runtime identity is all three
    fields or none, and a (container, device) pair appears once."""
    key = MIG_ALLOCATIONS
    rows = _json_list(key, value)
    out: list[MigAllocation] = []
    seen: set[tuple[int, int]] = set()
    for i, row in enumerate(rows):
        fields = _fields(key, i, row, _ALLOCATION_KEYS)
        placement = _fields(key, i, fields.get("placement") or {}, ("start", "size"))
        allocation = MigAllocation(
            container_index=json_int(key, i, "containerIndex", fields, -_INT_MAX - 1, _INT_MAX),
            device_index=json_int(key, i, "deviceIndex", fields, -_INT_MAX - 1, _INT_MAX),
            gpu_uuid=json_text(key, i, "gpuUUID", fields),
            profile=json_text(key, i, "profile", fields),
            start=json_int(key, i, *_placed("start", placement), 0, _UINT32),
            size=json_int(key, i, *_placed("size", placement), 0, _UINT32),
            mig_uuid=json_text(key, i, "migUUID", fields),
            gpu_instance_id=_optional(key, i, "gpuInstanceID", fields),
            compute_instance_id=_optional(key, i, "computeInstanceID", fields),
        )
        a = allocation
        if a.container_index < 0 or a.device_index < 0 or not a.gpu_uuid or not a.profile:
            raise HamiAnnotationError(key, i, "", row, f"MIG allocation {i} is incomplete")
        if a.size == 0:
            raise HamiAnnotationError(key, i, "placement.size", 0, "incomplete: size 0")
        runtime = (
            bool(a.mig_uuid),
            a.gpu_instance_id is not None,
            a.compute_instance_id is not None,
        )
        if any(runtime) and not all(runtime):
            reason = "partial runtime identity: give migUUID, gpuInstanceID and computeInstanceID"
            raise HamiAnnotationError(key, i, "migUUID", a.mig_uuid, reason)
        pair = (a.container_index, a.device_index)
        if pair in seen:
            reason = f"duplicate MIG allocation for container {pair[0]} device {pair[1]}"
            raise HamiAnnotationError(key, i, "deviceIndex", a.device_index, reason)
        seen.add(pair)
        out.append(allocation)
    return tuple(out)


@dataclass(frozen=True, slots=True)
class VnpuRuntime:
    """One entry of the Ascend runtime annotation: HAMi's ``RuntimeInfo`` (the card's UUID, the
    vNPU template, memory MiB, cores)."""

    uuid: str
    template: str = ""
    memory_mib: int = 0
    cores: int = 0


def vnpu_runtime_key(common_word: str) -> str:
    """The annotation the Ascend device plugin reads: ``huawei.com/<CommonWord>``."""
    return f"huawei.com/{common_word}"


def encode_vnpu_runtime(entries: Sequence[VnpuRuntime]) -> str:
    """``json.Marshal([]RuntimeInfo)``: every field ``omitempty``."""
    rows = []
    for e in entries:
        row = {"UUID": e.uuid, "temp": e.template, "memory": e.memory_mib, "core": e.cores}
        rows.append({k: v for k, v in row.items() if v})
    return go_json(rows)


def decode_vnpu_runtime(key: str, value: object) -> tuple[VnpuRuntime, ...]:
    """The entries of a ``huawei.com/<CommonWord>`` annotation; each needs a UUID."""
    out = []
    for i, row in enumerate(_json_list(key, value)):
        fields = _fields(key, i, row, ("UUID", "temp", "memory", "core"))
        entry = VnpuRuntime(
            uuid=json_text(key, i, "UUID", fields),
            template=json_text(key, i, "temp", fields),
            memory_mib=json_int(key, i, "memory", fields, -_INT_MAX - 1, _INT_MAX),
            cores=json_int(key, i, "core", fields, -(1 << 31), (1 << 31) - 1),
        )
        if not entry.uuid:
            raise HamiAnnotationError(key, i, "UUID", "", "must not be empty")
        out.append(entry)
    return tuple(out)


def mig_instance_uuids(annotations: Mapping[str, str]) -> dict[tuple[int, int], str]:
    """The MIG instance each (container, device) entry of a pod's NVIDIA assignment holds: the
    MIG UUID HAMi's device plugin filled in, else the UUID xpupool gives the instance it
    declared at that start (``partition_cards.instance_uuid``). Empty without the annotation."""
    value = annotations.get(MIG_ALLOCATIONS)
    if value is None:
        return {}
    return {
        (a.container_index, a.device_index): a.mig_uuid
        or instance_uuid(a.gpu_uuid, "mig", a.start, 0)
        for a in decode_mig_allocations(value)
    }


def vnpu_template(scheme: PartitionScheme, memory_mib: int) -> str:
    """``trimMemory``'s template name: the first template by memory whose memory holds
    ``memory_mib``; "" when none does (HAMi then gives the whole card, no template)."""
    for profile in sorted(scheme.profiles, key=lambda p: p.memory_mib):
        if memory_mib <= profile.memory_mib:
            return profile.name
    return ""


def mig_resource_profile(name: str) -> str | None:
    """The MIG profile a ``nvidia.com/mig-<profile>`` resource name asks for (``.me`` read back
    as ``+me``), or None for any other name."""
    if not name.startswith(MIG_RESOURCE_PREFIX) or len(name) > _MAX_TEXT:
        return None
    profile = name[len(MIG_RESOURCE_PREFIX) :]
    return profile[: -len(".me")] + "+me" if profile.endswith(".me") else profile


def mig_resource_name(profile: str) -> str:
    """The device plugin's resource name for a static MIG profile (``+`` written ``.``)."""
    return MIG_RESOURCE_PREFIX + profile.replace("+", ".")


# --- Go's decoding -----------------------------------------------------------------------------


def _json_list(key: str, value: object) -> list[object]:
    if not isinstance(value, str):
        raise HamiAnnotationError(key, None, "", value, "expected a string")
    if len(value) > MAX_ANNOTATION_CHARS:
        raise HamiAnnotationError(key, None, "", len(value), "annotation too large")
    if not value:
        return []
    try:
        data = json.loads(value)
    except (ValueError, RecursionError) as exc:
        raise HamiAnnotationError(key, None, "", value, f"not valid JSON: {exc}") from None
    if data is None:
        return []
    if not isinstance(data, list):
        raise HamiAnnotationError(key, None, "", value, "expected a JSON array")
    if len(data) > MAX_ENTRIES:
        raise HamiAnnotationError(key, None, "", len(data), f"more than {MAX_ENTRIES} entries")
    return data


def _placed(name: str, placement: Mapping[str, object]) -> tuple[str, dict[str, object]]:
    """A placement field under its path in the allocation, for the error that names it."""
    return f"placement.{name}", field_at("placement", name, placement)


def _fields(key: str, i: int, row: object, names: Sequence[str]) -> dict[str, object]:
    if not isinstance(row, Mapping):
        raise HamiAnnotationError(key, i, "", row, "expected a JSON object")
    return go_fields(row, names)


def _optional(key: str, i: int, name: str, fields: Mapping[str, object]) -> int | None:
    if fields.get(name) is None:
        return None
    return json_int(key, i, name, fields, 0, _UINT32)
