"""HAMi's annotation protocol, both directions: node device registration and pod device assignment.

Written from HAMi v2.10.0 (github.com/Project-HAMi/HAMi, commit 4707fb02c91c), pkg/device/devices.go:
``DeviceInfo`` and ``MarshalNodeDevices``/``UnMarshalNodeDevices`` (the JSON registration NVIDIA,
AMD, Ascend and Kunlun vXPU write since v2.8), ``EncodeNodeDevices``/``DecodeNodeDevices`` (the
legacy ``id,count,devmem,devcore,type,numa,health[,index,mode]`` entries, ``:``-terminated, that
Hygon and Iluvatar still write and NVIDIA wrote up to v2.7), and ``EncodePodSingleDevice`` /
``DecodePodDevices`` (``uuid,type,usedmem,usedcores:`` per device, ``;`` after every container, init
containers first), and the Node annotation ``hami.io/device-cordon`` (pkg/device/nvidia/device.go
``cordonedDevices``: card UUIDs, comma-separated). Decoding mirrors Go's parsers
(``strconv.ParseInt`` 32-bit, ``ParseBool``, JSON keys matched case-insensitively, unknown keys
ignored, omitted fields zero) but refuses what
HAMi would log and skip: every problem raises :class:`HamiAnnotationError` naming the annotation
key, the entry index and the field. Values longer than :data:`MAX_ANNOTATION_CHARS` or with more
than :data:`MAX_ENTRIES` entries are refused before parsing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from xpupool.catalog import AcceleratorCatalog, load_accelerators
from xpupool.k8s.codec.go_json import go_json
from xpupool.k8s.codec.resource_names import DEVICE_KINDS, DeviceKind, kind_by_type
from xpupool.model.allocation import DeviceShare
from xpupool.model.device import Device
from xpupool.model.errors import RequestError

__all__ = [
    "ALLOCATING",
    "ASSIGNED_NODE",
    "ASSIGNED_TIME",
    "BIND_PHASE",
    "BIND_TIME",
    "DEFAULT_SPLIT_COUNT",
    "DEVICE_CORDON",
    "MAX_ANNOTATION_CHARS",
    "MAX_ENTRIES",
    "ContainerDevice",
    "DeviceInfo",
    "HamiAnnotationError",
    "MigProfileInfo",
    "assignment_annotations",
    "container_device",
    "cordoned_cards",
    "core_permille",
    "decode_device_infos",
    "decode_pod_devices",
    "decode_register",
    "device_from_info",
    "encode_legacy_register",
    "encode_pod_devices",
    "encode_register",
    "go_bool",
    "info_from_device",
    "kind_by_register_key",
    "node_devices",
    "pod_assignment",
]

# pkg/util/types.go.
ASSIGNED_NODE = "hami.io/vgpu-node"
ASSIGNED_TIME = "hami.io/vgpu-time"
BIND_TIME = "hami.io/bind-time"
BIND_PHASE = "hami.io/bind-phase"
ALLOCATING = "allocating"
# pkg/device/nvidia/device.go DeviceCordonAnnotation: read for every card of the node.
DEVICE_CORDON = "hami.io/device-cordon"
# The chart's devicePlugin.deviceSplitCount: tasks a card takes when our device says no limit.
DEFAULT_SPLIT_COUNT = 10
# Kubernetes caps all annotations of an object at 256 KiB (TotalAnnotationSizeLimitB).
MAX_ANNOTATION_CHARS = 256 * 1024
MAX_ENTRIES = 1024
_INT32 = (1 << 31) - 1
_MAX_TEXT = 512
_GO_TRUE = ("1", "t", "T", "TRUE", "true", "True")  # strconv.ParseBool
_GO_FALSE = ("0", "f", "F", "FALSE", "false", "False")


class HamiAnnotationError(RequestError):
    """A HAMi annotation we cannot read: ``key`` the annotation, ``entry`` the index of the
    device (or container) in it (None: the whole value), ``part`` the field; ``field`` is
    ``key[entry].part``."""

    def __init__(self, key: str, entry: int | None, part: str, value: object, reason: str) -> None:
        self.key = key
        self.entry = entry
        self.part = part
        where = key + ("" if entry is None else f"[{entry}]") + (f".{part}" if part else "")
        text = repr(value)
        super().__init__(where, value if len(text) <= 100 else text[:100] + "...", reason)


@dataclass(frozen=True, slots=True)
class DeviceInfo:
    """HAMi's ``DeviceInfo`` as registered: ``count`` tasks may share the card, ``devmem`` MiB,
    ``devcore`` the card's cores (100 for a percentage), ``type`` HAMi's type string."""

    id: str
    index: int = 0
    count: int = 0
    devmem: int = 0
    devcore: int = 0
    type: str = ""
    numa: int = 0
    mode: str = ""
    health: bool = False
    mig_profiles: tuple[MigProfileInfo, ...] = ()


@dataclass(frozen=True, slots=True)
class MigProfileInfo:
    """One MIG profile a card in HAMi's ``mig`` mode may be cut into, as its device plugin
    registers it from NVML (pkg/device/devices.go ``MigProfile``: ``discoverMigProfiles`` in
    nvinternal/plugin/register.go): memory MB, cores in percent of the card, compute slices, and
    the placements (start, size in memory slices) NVML allows. HAMi cuts instances on demand, so
    a registration lists what a card may hold, not instances it holds."""

    name: str
    memory_mb: int
    core: int
    slice_count: int
    placements: tuple[tuple[int, int], ...]


@dataclass(frozen=True, slots=True)
class ContainerDevice:
    """One device share of one container: HAMi's ``ContainerDevice`` (UUID, Type, Usedmem in MiB,
    Usedcores in percent of the card)."""

    uuid: str
    type: str
    used_mem_mib: int
    used_cores: int


def kind_by_register_key(key: str) -> DeviceKind | None:
    """The device type whose node registration annotation is ``key``, or None."""
    return _BY_REGISTER.get(key)


_BY_REGISTER = {k.register_key: k for k in DEVICE_KINDS if k.register_key is not None}


# --- node registration -------------------------------------------------------------------------


def decode_device_infos(key: str, value: object) -> tuple[DeviceInfo, ...]:
    """The entries of a registration annotation: JSON when it starts with ``[`` (v2.8+), the
    legacy string otherwise (``DecodeNodeDevices``: needs a ``:``, 7 or 9 fields an entry)."""
    if not isinstance(value, str):
        raise HamiAnnotationError(key, None, "", value, "expected a string")
    if len(value) > MAX_ANNOTATION_CHARS:
        raise HamiAnnotationError(key, None, "", len(value), "annotation too large")
    if value.lstrip().startswith("["):
        return _decode_json(key, value)
    return _decode_legacy(key, value)


def _decode_json(key: str, value: str) -> tuple[DeviceInfo, ...]:
    try:
        data = json.loads(value)
    except (ValueError, RecursionError) as exc:
        raise HamiAnnotationError(key, None, "", value, f"not valid JSON: {exc}") from None
    if not isinstance(data, list):
        raise HamiAnnotationError(key, None, "", value, "expected a JSON array of devices")
    if len(data) > MAX_ENTRIES:
        raise HamiAnnotationError(key, None, "", len(data), f"more than {MAX_ENTRIES} devices")
    out = []
    for i, entry in enumerate(data):
        if not isinstance(entry, dict):
            raise HamiAnnotationError(key, i, "", entry, "expected a JSON object")
        fields = go_fields(entry)
        out.append(
            DeviceInfo(
                id=json_text(key, i, "id", fields),
                index=json_int(key, i, "index", fields, 0, _INT32),
                count=json_int(key, i, "count", fields, -_INT32 - 1, _INT32),
                devmem=json_int(key, i, "devmem", fields, -_INT32 - 1, _INT32),
                devcore=json_int(key, i, "devcore", fields, -_INT32 - 1, _INT32),
                type=json_text(key, i, "type", fields),
                numa=json_int(key, i, "numa", fields, -_INT32 - 1, _INT32),
                mode=json_text(key, i, "mode", fields),
                health=_json_bool(key, i, "health", fields),
                mig_profiles=_mig_profiles(key, i, fields.get("migProfiles")),
            )
        )
    return tuple(out)


# DeviceInfo's JSON fields in the Go struct's order (MarshalNodeDevices writes them so)
_JSON_KEYS = (
    "id",
    "index",
    "count",
    "devmem",
    "devcore",
    "type",
    "numa",
    "mode",
    "migProfiles",
    "health",
)
_PROFILE_KEYS = ("name", "memoryMB", "core", "sliceCount", "placements")
_UINT32 = (1 << 32) - 1


def _mig_profiles(key: str, i: int, value: object) -> tuple[MigProfileInfo, ...]:
    """A card's ``migProfiles``: absent or null is none; each profile needs a name."""
    if value is None:
        return ()
    part = "migProfiles"
    if not isinstance(value, list) or len(value) > MAX_ENTRIES:
        raise HamiAnnotationError(key, i, part, value, "expected a JSON array of profiles")
    out = []
    for j, row in enumerate(value):
        where = f"{part}[{j}]"
        if not isinstance(row, dict):
            raise HamiAnnotationError(key, i, where, row, "expected a JSON object")
        fields = go_fields(row, _PROFILE_KEYS)
        name = json_text(key, i, f"{where}.name", field_at(where, "name", fields))
        if not name:
            raise HamiAnnotationError(key, i, f"{where}.name", name, "must not be empty")
        raw = fields.get("placements")
        if raw is not None and (not isinstance(raw, list) or len(raw) > MAX_ENTRIES):
            raise HamiAnnotationError(key, i, f"{where}.placements", raw, "expected a JSON array")
        placements = []
        for k, item in enumerate(raw or ()):
            at = f"{where}.placements[{k}]"
            if not isinstance(item, dict):
                raise HamiAnnotationError(key, i, at, item, "expected a JSON object")
            spot = go_fields(item, ("start", "size"))
            placements.append(
                (
                    json_int(key, i, f"{at}.start", field_at(at, "start", spot), 0, _UINT32),
                    json_int(key, i, f"{at}.size", field_at(at, "size", spot), 0, _UINT32),
                )
            )
        out.append(
            MigProfileInfo(
                name=name,
                memory_mb=json_int(
                    key,
                    i,
                    f"{where}.memoryMB",
                    field_at(where, "memoryMB", fields),
                    -_INT32 - 1,
                    _INT32,
                ),
                core=json_int(
                    key, i, f"{where}.core", field_at(where, "core", fields), -_INT32 - 1, _INT32
                ),
                slice_count=json_int(
                    key, i, f"{where}.sliceCount", field_at(where, "sliceCount", fields), 0, _UINT32
                ),
                placements=tuple(placements),
            )
        )
    return tuple(out)


def field_at(where: str, name: str, fields: Mapping[str, object]) -> dict[str, object]:
    """``fields[name]`` under its full path, for the field readers that name what they read."""
    return {f"{where}.{name}": fields.get(name)}


def go_fields(entry: Mapping[str, object], names: Sequence[str] = _JSON_KEYS) -> dict[str, object]:
    """Go's decoder: an exact key wins, else a case-insensitive one; unknown keys ignored."""
    lower = {n.lower(): n for n in names}
    out: dict[str, object] = {}
    exact: set[str] = set()
    for name, value in entry.items():
        if name in names:
            out[name] = value
            exact.add(name)
        elif name.lower() in lower and lower[name.lower()] not in exact:
            out[lower[name.lower()]] = value
    return out


def json_text(key: str, i: int, name: str, fields: Mapping[str, object]) -> str:
    value = fields.get(name)
    if value is None:
        return ""
    if not isinstance(value, str) or len(value) > _MAX_TEXT:
        raise HamiAnnotationError(key, i, name, value, "expected a string")
    return value


def json_int(key: str, i: int, name: str, fields: Mapping[str, object], low: int, high: int) -> int:
    value = fields.get(name)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise HamiAnnotationError(key, i, name, value, f"expected a whole number in {low}..{high}")
    return value


def _json_bool(key: str, i: int, name: str, fields: Mapping[str, object]) -> bool:
    value = fields.get(name)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise HamiAnnotationError(key, i, name, value, "expected true or false")
    return value


_LEGACY_FIELDS = ("id", "count", "devmem", "devcore", "type", "numa", "health", "index", "mode")


def _decode_legacy(key: str, value: str) -> tuple[DeviceInfo, ...]:
    if ":" not in value:
        raise HamiAnnotationError(key, None, "", value, "missing the ':' device separator")
    segments = [s for s in value.split(":") if s]
    if len(segments) > MAX_ENTRIES:
        raise HamiAnnotationError(key, None, "", len(segments), f"more than {MAX_ENTRIES} devices")
    out = []
    for i, segment in enumerate(segments):
        items = segment.split(",")
        if len(items) not in (7, 9):
            reason = f"expected 7 or 9 ','-separated fields ({', '.join(_LEGACY_FIELDS)}), got {len(items)}"
            raise HamiAnnotationError(key, i, "", segment, reason)
        if len(items[0]) > _MAX_TEXT or len(items[4]) > _MAX_TEXT:
            raise HamiAnnotationError(key, i, "id", items[0][:_MAX_TEXT], "too long")
        health = items[6]
        if health not in _GO_TRUE + _GO_FALSE:
            raise HamiAnnotationError(key, i, "health", health, "expected true or false")
        index = _go_int(key, i, "index", items[7]) if len(items) == 9 else 0
        if index < 0:
            raise HamiAnnotationError(key, i, "index", index, "must not be negative")
        out.append(
            DeviceInfo(
                id=items[0],
                count=_go_int(key, i, "count", items[1]),
                devmem=_go_int(key, i, "devmem", items[2]),
                devcore=_go_int(key, i, "devcore", items[3]),
                type=items[4],
                numa=_go_int(key, i, "numa", items[5]),
                health=health in _GO_TRUE,
                index=index,
                mode=items[8] if len(items) == 9 else "hami-core",
            )
        )
    return tuple(out)


def _go_int(key: str, i: int | None, name: str, text: str) -> int:
    """``strconv.ParseInt(text, 10, 32)``: optional sign, decimal digits, int32 range."""
    body = text[1:] if text[:1] in "+-" else text
    if not body or not body.isascii() or not body.isdigit() or len(body) > 11:
        raise HamiAnnotationError(key, i, name, text, "expected a whole number")
    number = int(text)
    if not -_INT32 - 1 <= number <= _INT32:
        raise HamiAnnotationError(key, i, name, text, "out of the int32 range")
    return number


def device_from_info(
    key: str, i: int, info: DeviceInfo, kind: DeviceKind, catalog: AcceleratorCatalog | None = None
) -> Device:
    """An engine :class:`Device` from HAMi's entry ``i`` of annotation ``key``: uuid = id,
    model = the type string without the device plugin's ``<type>-`` prefix
    (``NVIDIA-Tesla V100-SXM2-32GB`` -> ``V100-SXM2-32GB``, the catalog's name when it knows it),
    memory_mib = devmem, compute_units = devcore, numa_node = numa, healthy = health,
    max_tasks = count (HAMi's per-card task limit), type_name = the type string verbatim (what HAMi's
    ``use-gputype`` annotations match, ``CheckType``), share_mode = mode (``hami-core``, ``mps``,
    ``mig``; empty: None, not stated). A card in HAMi's ``mig`` mode registers the profiles it
    may be cut into (``DeviceInfo.mig_profiles``), not instances: HAMi cuts them per pod, so it
    is read as a card in mode ``mig``, which takes no software share."""
    if not info.id:
        raise HamiAnnotationError(key, i, "id", info.id, "must not be empty")
    if info.devmem <= 0:
        raise HamiAnnotationError(key, i, "devmem", info.devmem, "must be more than 0 MiB")
    if info.count < 1:
        raise HamiAnnotationError(key, i, "count", info.count, "must be at least 1 task")
    if info.devcore < 0 or info.numa < 0:
        part, value = ("devcore", info.devcore) if info.devcore < 0 else ("numa", info.numa)
        raise HamiAnnotationError(key, i, part, value, "must not be negative")
    return Device(
        uuid=info.id,
        vendor=kind.vendor,
        model=_model_name(info.type, kind, catalog),
        memory_mib=info.devmem,
        index=info.index,
        compute_units=info.devcore,
        numa_node=info.numa,
        healthy=info.health,
        max_tasks=info.count,
        type_name=info.type or None,
        share_mode=info.mode or None,
    )


def _model_name(hami_type: str, kind: DeviceKind, catalog: AcceleratorCatalog | None) -> str:
    prefix = kind.hami_type + "-"
    printed = (
        hami_type[len(prefix) :] if hami_type.upper().startswith(prefix.upper()) else hami_type
    )
    printed = printed or hami_type or kind.model or kind.hami_type
    found = (catalog or load_accelerators()).lookup(printed, kind.vendor)
    return printed if found is None else found.name


def decode_register(
    key: str, value: object, catalog: AcceleratorCatalog | None = None
) -> tuple[Device, ...]:
    """A node's HAMi registration annotation ``key`` as engine devices; raises
    :class:`HamiAnnotationError` for an unknown key, a malformed value or a duplicate UUID."""
    kind = kind_by_register_key(key)
    if kind is None:
        raise HamiAnnotationError(key, None, "", key, "not a HAMi registration annotation")
    devices = []
    seen: set[str] = set()
    for i, info in enumerate(decode_device_infos(key, value)):
        if info.id in seen:
            raise HamiAnnotationError(key, i, "id", info.id, "duplicate device id")
        seen.add(info.id)
        devices.append(device_from_info(key, i, info, kind, catalog))
    return tuple(devices)


def info_from_device(device: Device, kind: DeviceKind) -> DeviceInfo:
    """HAMi's registration entry for one of our devices (for our node agent to write).

    ``devcore`` is the card's whole in HAMi's core units (``kind.cores_per_card``: 100 for a
    percentage, as the NVIDIA device plugin registers ``DeviceCoreScaling * 100``), not our
    ``compute_units`` (SMs, AI cores): HAMi compares it with pods' core requests. A device type
    that names one chip (Ascend, Iluvatar) registers its type string alone (``Ascend910B3``)."""
    return DeviceInfo(
        id=device.uuid,
        index=device.index,
        count=device.max_tasks or DEFAULT_SPLIT_COUNT,
        devmem=device.memory_mib,
        devcore=kind.cores_per_card,
        type=_registered_type(device, kind),
        numa=device.numa_node or 0,
        mode="hami-core" if kind.vendor == "nvidia" else "",
        health=device.healthy,
    )


def _registered_type(device: Device, kind: DeviceKind) -> str:
    """The type string to register: the card's own when it has one (read from a registration, so
    writing it back changes nothing a ``use-gputype`` annotation matches), else the device
    plugin's."""
    if device.type_name is not None:
        return device.type_name
    return kind.hami_type if kind.model is not None else _hami_type_string(device.model, kind)


def _hami_type_string(model: str, kind: DeviceKind) -> str:
    """The device plugin's type string: the model, prefixed with ``<type>-`` unless it already
    starts with the type (nvidiadevice/nvinternal/plugin/register.go: ``NVIDIA-%s``)."""
    if model.upper().startswith(kind.hami_type.upper()):
        return model
    return f"{kind.hami_type}-{model}"


def encode_register(infos: Sequence[DeviceInfo]) -> str:
    """``MarshalNodeDevices``: a JSON array, fields in DeviceInfo's order, zero values left out
    (every field is ``omitempty``), Go's escaping."""
    rows = []
    for info in infos:
        row: dict[str, object] = {
            name: getattr(info, name) for name in _JSON_KEYS if name != "migProfiles"
        }
        row["migProfiles"] = [
            {
                "name": p.name,
                "memoryMB": p.memory_mb,
                "core": p.core,
                "sliceCount": p.slice_count,
                "placements": [{"start": s, "size": z} for s, z in p.placements] or None,
            }
            for p in info.mig_profiles
        ]
        ordered = {name: row[name] for name in _JSON_KEYS}
        rows.append({k: v for k, v in ordered.items() if v})  # omitempty: 0, "", false, []
    return go_json(rows)


def encode_legacy_register(infos: Sequence[DeviceInfo]) -> str:
    """``EncodeNodeDevices``: ``id,count,devmem,devcore,type,numa,health,index,mode:`` each."""
    return "".join(
        f"{d.id},{d.count},{d.devmem},{d.devcore},{d.type},{d.numa},"
        f"{'true' if d.health else 'false'},{d.index},{d.mode}:"
        for d in infos
    )


# --- pod assignment ----------------------------------------------------------------------------


def encode_pod_devices(containers: Sequence[Sequence[ContainerDevice]]) -> str:
    """``EncodePodSingleDevice``: for each container (init containers first, every container of
    the pod, empty ones too) its devices as ``uuid,type,usedmem,usedcores:``, then ``;``."""
    return "".join(
        "".join(f"{d.uuid},{d.type},{d.used_mem_mib},{d.used_cores}:" for d in devices) + ";"
        for devices in containers
    )


def decode_pod_devices(key: str, value: object) -> tuple[tuple[ContainerDevice, ...], ...]:
    """``DecodePodDevices`` for one annotation: a tuple per container in HAMi's order. The ``;``
    HAMi writes after the last container ends it (HAMi's own decoder also returns an empty entry
    after it, which maps to no container). Empty ``:`` segments are skipped, as HAMi skips them;
    a non-empty one needs at least 4 fields (more are ignored, as HAMi ignores them)."""
    if not isinstance(value, str):
        raise HamiAnnotationError(key, None, "", value, "expected a string")
    if len(value) > MAX_ANNOTATION_CHARS:
        raise HamiAnnotationError(key, None, "", len(value), "annotation too large")
    parts = value.split(";")
    if parts and parts[-1] == "" and len(parts) > 1:
        parts.pop()
    if len(parts) > MAX_ENTRIES:
        raise HamiAnnotationError(key, None, "", len(parts), f"more than {MAX_ENTRIES} containers")
    out = []
    for c, part in enumerate(parts):
        devices = []
        for segment in part.split(":"):
            if not segment:
                continue
            items = segment.split(",")
            if len(items) < 4:
                reason = "expected uuid,type,usedmem,usedcores"
                raise HamiAnnotationError(key, c, "", segment[:_MAX_TEXT], reason)
            if not items[0] or len(items[0]) > _MAX_TEXT or len(items[1]) > _MAX_TEXT:
                raise HamiAnnotationError(key, c, "uuid", items[0][:_MAX_TEXT], "bad device UUID")
            devices.append(
                ContainerDevice(
                    uuid=items[0],
                    type=items[1],
                    used_mem_mib=_go_int(key, c, "usedmem", items[2]),
                    used_cores=_go_int(key, c, "usedcores", items[3]),
                )
            )
            if len(devices) > MAX_ENTRIES:
                raise HamiAnnotationError(key, c, "", len(devices), "too many devices")
        out.append(tuple(devices))
    return tuple(out)


def container_device(share: DeviceShare, kind: DeviceKind) -> ContainerDevice:
    """An engine device share as HAMi writes it for ``kind``: Type is the request's device type
    (HAMi's ``Fit`` writes ``k.Type``), Usedmem MiB, Usedcores in the type's core units (percent
    for most, 16 a card for Moore Threads), rounded up so the limiter never gets less."""
    cores = -(-share.core_permille * kind.cores_per_card // 1000)
    return ContainerDevice(share.uuid, kind.hami_type, share.memory_mib, cores)


def core_permille(device: ContainerDevice, kind: DeviceKind) -> int:
    """The thousandths of a card a HAMi share's Usedcores holds, rounded up (to charge a pod
    bound by HAMi to its card): 30 -> 300 for NVIDIA, 8 of 16 -> 500 for Moore Threads."""
    return min(1000, -(-max(device.used_cores, 0) * 1000 // kind.cores_per_card))


def assignment_annotations(
    kind: DeviceKind,
    containers: Sequence[Sequence[ContainerDevice]],
    node: str,
    now_unix: int,
) -> dict[str, str]:
    """The pod annotations HAMi's scheduler writes when it assigns devices (scheduler.go
    ``Filter``: ``hami.io/vgpu-node``, ``hami.io/vgpu-time`` in Unix seconds, and each device
    type's ``PatchAnnotations``: the same encoding under its to-allocate key, read by the device
    plugin, and its allocated key) plus ``Bind``'s ``hami.io/bind-phase: allocating`` and
    ``hami.io/bind-time``. ``containers`` has one entry per container of the pod, in HAMi's order."""
    if kind_by_type(kind.hami_type) is not kind:
        raise ValueError(f"{kind.hami_type} is not a row of the resource table")
    encoded = encode_pod_devices(containers)
    out = {ASSIGNED_NODE: node, ASSIGNED_TIME: str(now_unix)}
    if kind.to_allocate_key is not None:
        out[kind.to_allocate_key] = encoded
    if kind.allocated_key is not None:
        out[kind.allocated_key] = encoded
    out[BIND_PHASE] = ALLOCATING
    out[BIND_TIME] = str(now_unix)
    return out


# --- whole objects -----------------------------------------------------------------------------


def go_bool(text: str) -> bool | None:
    """``strconv.ParseBool``: True or False for the texts Go accepts, None for any other."""
    return True if text in _GO_TRUE else False if text in _GO_FALSE else None


def cordoned_cards(annotations: Mapping[str, str]) -> frozenset[str]:
    """The card UUIDs a Node's ``hami.io/device-cordon`` names, read as HAMi reads it
    (``cordonedDevices``): split on ``,``, each item trimmed, empty items skipped; absent or blank:
    none. A UUID of no card of the node cordons nothing. Raises :class:`HamiAnnotationError` for
    a value over :data:`MAX_ANNOTATION_CHARS` or with more than :data:`MAX_ENTRIES` items."""
    value = annotations.get(DEVICE_CORDON)
    if value is None:
        return frozenset()
    if len(value) > MAX_ANNOTATION_CHARS:
        raise HamiAnnotationError(DEVICE_CORDON, None, "", len(value), "annotation too large")
    items = [item.strip() for item in value.split(",")]
    cards = frozenset(item for item in items if item)
    if len(cards) > MAX_ENTRIES:
        raise HamiAnnotationError(DEVICE_CORDON, None, "", len(cards), f"more than {MAX_ENTRIES}")
    return cards


def node_devices(
    annotations: Mapping[str, str], catalog: AcceleratorCatalog | None = None
) -> tuple[Device, ...]:
    """Every device a Node's HAMi registration annotations announce, in the table's order of
    device types; a UUID announced twice (under two types) raises :class:`HamiAnnotationError`."""
    devices: list[Device] = []
    seen: dict[str, str] = {}
    for kind in DEVICE_KINDS:
        key = kind.register_key
        if key is None or key not in annotations:
            continue
        for i, device in enumerate(decode_register(key, annotations[key], catalog)):
            if device.uuid in seen:
                reason = f"also registered under {seen[device.uuid]}"
                raise HamiAnnotationError(key, i, "id", device.uuid, reason)
            seen[device.uuid] = key
            devices.append(device)
    return tuple(devices)


def pod_assignment(
    annotations: Mapping[str, str],
) -> tuple[tuple[DeviceKind, tuple[tuple[ContainerDevice, ...], ...]], ...]:
    """What HAMi (or we) assigned a pod, per device type: its ``allocated`` annotation decoded,
    one tuple per container in HAMi's order (``DecodePodDevices`` over ``SupportDevices``, what
    HAMi's scheduler charges a bound pod from). Empty when the pod holds nothing."""
    out = []
    for kind in DEVICE_KINDS:
        key = kind.allocated_key
        if key is not None and key in annotations:
            out.append((kind, decode_pod_devices(key, annotations[key])))
    return tuple(out)
