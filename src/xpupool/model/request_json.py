"""The JSON form of a placement :class:`~xpupool.model.request.Request`.

Strict on write: an unknown key, a wrong type or a bad quantity raises :class:`RequestError` whose
``field`` is the full path of the offending value (``devices.memroy``, ``devices.software[1]``).
A ``null`` value means "not given" (the default applies). Quantities are written the way people
write them: ``cpu`` as ``"4"``, ``"500m"`` or ``2``; ``memory`` as ``"16Gi"`` (a bare number is MiB);
``devices.memory`` as ``"40Gi"`` or ``"50%"``; ``devices.cores`` as ``"50%"``; and card sizes
(``devices.card_memory``) in marketed, binary units where ``80GB`` means 80 GiB
(:func:`~xpupool.model.quantity.parse_card_mib`).

:func:`request_to_dict` writes the canonical form: defaults are left out, quantities are strings in
their exact unit, and :func:`request_from_dict` reads it back to an equal ``Request``.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from xpupool.model.errors import RequestError
from xpupool.model.quantity import (
    format_card_mib,
    format_cpu_milli,
    format_mib_exact,
    format_permille,
    parse_card_mib,
    parse_card_range,
    parse_cpu_milli,
    parse_device_memory,
    parse_memory_mib,
    parse_percent_permille,
)
from xpupool.model.request import (
    DeviceRequest,
    Request,
    SoftwareNeed,
    Topology,
    parse_device_policy,
    parse_software_need,
    parse_topology,
)
from xpupool.model.vendor import vendor_key

__all__ = [
    "CARD_MEMORY_KEYS",
    "DEVICE_KEYS",
    "TOP_KEYS",
    "request_from_dict",
    "request_to_dict",
]

TOP_KEYS: tuple[str, ...] = (
    "name",
    "cpu",
    "memory",
    "devices",
    "replicas",
    "gang",
    "priority",
    "queue",
    "node_policy",
    "device_policy",
)
DEVICE_KEYS: tuple[str, ...] = (
    "count",
    "vendors",
    "models",
    "exclude_models",
    "card_memory",
    "memory",
    "cores",
    "uuids",
    "exclude_uuids",
    "topology",
    "software",
)
CARD_MEMORY_KEYS: tuple[str, ...] = ("min", "max")
_T = TypeVar("_T")


# ----------------------------------------------------------------------------------------- read
def request_from_dict(data: Mapping[str, object]) -> Request:
    """Build a :class:`Request` from its JSON form; raises :class:`RequestError` with a full path.

    ``devices`` absent (or ``null``) is a CPU-only request; ``devices`` present without ``count``
    asks for one device, as a GPU spec without a count does.
    """
    obj = _object("request", data, TOP_KEYS, "")
    devices = DeviceRequest()
    if obj.get("devices") is not None:
        devices = _devices_from_dict(obj["devices"])
    name = _opt(obj, "name", _str)
    cpu_milli = _opt(obj, "cpu", parse_cpu_milli)
    memory_mib = _opt(obj, "memory", parse_memory_mib)
    replicas = _opt(obj, "replicas", _int)
    gang = _opt(obj, "gang", _bool)
    priority = _opt(obj, "priority", _int)
    queue = _opt(obj, "queue", _nonempty_str)
    return Request(
        name="" if name is None else name,
        cpu_milli=0 if cpu_milli is None else cpu_milli,
        memory_mib=0 if memory_mib is None else memory_mib,
        devices=devices,
        replicas=1 if replicas is None else replicas,
        gang=False if gang is None else gang,
        priority=0 if priority is None else priority,
        queue="default" if queue is None else queue,
        node_policy=_opt(obj, "node_policy", _nonempty_str),
        device_policy=_opt(obj, "device_policy", parse_device_policy),
    )


def _devices_from_dict(data: object) -> DeviceRequest:
    obj = _object("devices", data, DEVICE_KEYS, "devices.")
    count = _opt(obj, "count", _int, "devices.")
    memory_mib = memory_permille = None
    if obj.get("memory") is not None:
        memory_mib, memory_permille = parse_device_memory("devices.memory", obj["memory"])
    models, exclude_models = _names_with_excludes(obj, "models", "exclude_models")
    uuids, exclude_uuids = _names_with_excludes(obj, "uuids", "exclude_uuids")
    min_card = max_card = None
    if obj.get("card_memory") is not None:
        min_card, max_card = _card_memory(obj["card_memory"])
    vendors = _list(obj, "vendors", lambda path, v: vendor_key(_str(path, v), path))
    software = _list(obj, "software", _software_need)
    topology = _opt(obj, "topology", parse_topology, "devices.")
    return DeviceRequest(
        count=1 if count is None else count,
        memory_mib=memory_mib,
        memory_permille=memory_permille,
        core_permille=_opt(obj, "cores", parse_percent_permille, "devices."),
        vendors=vendors,
        models=models,
        exclude_models=exclude_models,
        uuids=uuids,
        exclude_uuids=exclude_uuids,
        min_card_mib=min_card,
        max_card_mib=max_card,
        software=software,
        topology=topology or Topology.NONE,
    )


def _object(path: str, data: object, known: Sequence[str], prefix: str) -> Mapping[str, object]:
    if not isinstance(data, Mapping):
        raise RequestError(path, data, "expected an object")
    for key in data:
        if not isinstance(key, str):
            raise RequestError(path, key, "keys must be strings")
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise RequestError(
                f"{prefix}{key}", data[key], f"unknown key; {hint}known: {', '.join(known)}"
            )
    return data


def _opt(
    obj: Mapping[str, object],
    key: str,
    parse: Callable[[str, object], _T],
    prefix: str = "",
) -> _T | None:
    value = obj.get(key)
    return None if value is None else parse(f"{prefix}{key}", value)


def _list(
    obj: Mapping[str, object], key: str, parse: Callable[[str, object], _T]
) -> tuple[_T, ...]:
    path = f"devices.{key}"
    value = obj.get(key)
    if value is None:
        return ()
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise RequestError(path, value, "expected a list")
    return tuple(parse(f"{path}[{i}]", item) for i, item in enumerate(value))


def _names_with_excludes(
    obj: Mapping[str, object], key: str, exclude_key: str
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``models: ["A100", "!T4"]`` plus ``exclude_models: [...]`` -> (includes, excludes)."""
    include: list[str] = []
    exclude: list[str] = []
    for i, name in enumerate(_list(obj, key, _name)):
        if name.startswith("!"):
            rest = name[1:]
            if not rest or rest != rest.strip() or rest.startswith("!"):
                raise RequestError(f"devices.{key}[{i}]", name, "expected '!NAME' to exclude NAME")
            exclude.append(rest)
        else:
            include.append(name)
    for i, name in enumerate(_list(obj, exclude_key, _name)):
        if name.startswith("!"):
            raise RequestError(
                f"devices.{exclude_key}[{i}]", name, f"already an exclusion; write {name[1:]!r}"
            )
        exclude.append(name)
    return tuple(include), tuple(exclude)


def _card_memory(value: object) -> tuple[int | None, int | None]:
    """``{"min": "24GB", "max": "40GB"}``; also a string as in a GPU spec: ``"80GB"`` (exactly),
    ``"24GB..40GB"``, ``"48GB.."`` or ``"..40GB"``."""
    path = "devices.card_memory"
    if isinstance(value, str):
        return parse_card_range(path, value)
    obj = _object(path, value, CARD_MEMORY_KEYS, f"{path}.")
    low = _opt(obj, "min", parse_card_mib, f"{path}.")
    high = _opt(obj, "max", parse_card_mib, f"{path}.")
    if low is None and high is None:
        raise RequestError(path, value, "give min, max or both")
    return low, high


def _str(path: str, value: object) -> str:
    if not isinstance(value, str):
        raise RequestError(path, value, "expected a string")
    return value


def _nonempty_str(path: str, value: object) -> str:
    text = _str(path, value)
    if not text.strip():
        raise RequestError(path, value, "must not be empty")
    return text


def _name(path: str, value: object) -> str:
    """A model name or UUID: non-empty, no surrounding whitespace (a likely copy-paste slip)."""
    text = _nonempty_str(path, value)
    if text != text.strip():
        raise RequestError(path, value, "leading or trailing whitespace")
    return text


def _int(path: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestError(path, value, "expected a whole number")
    return value


def _bool(path: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise RequestError(path, value, "expected true or false")
    return value


def _software_need(path: str, value: object) -> SoftwareNeed:
    return parse_software_need(_str(path, value), path)


# ---------------------------------------------------------------------------------------- write
def request_to_dict(req: Request) -> dict[str, object]:
    """The canonical JSON form of ``req``: defaults left out, fixed key order, exact units.

    ``request_from_dict(request_to_dict(r)) == r`` for every valid ``r`` whose model names and
    UUIDs are non-empty, without surrounding whitespace and without a leading ``!``.
    """
    out: dict[str, object] = {}
    if req.name:
        out["name"] = req.name
    if req.cpu_milli:
        out["cpu"] = format_cpu_milli(req.cpu_milli)
    if req.memory_mib:
        out["memory"] = format_mib_exact(req.memory_mib)
    if req.devices != DeviceRequest():
        out["devices"] = _devices_to_dict(req.devices)
    if req.replicas != 1:
        out["replicas"] = req.replicas
    if req.gang:
        out["gang"] = True
    if req.priority:
        out["priority"] = req.priority
    if req.queue != "default":
        out["queue"] = req.queue
    if req.node_policy is not None:
        out["node_policy"] = req.node_policy
    if req.device_policy is not None:
        out["device_policy"] = req.device_policy.value
    return out


def _devices_to_dict(d: DeviceRequest) -> dict[str, object]:
    out: dict[str, object] = {"count": d.count}
    for key in ("vendors", "models", "exclude_models"):
        names: tuple[str, ...] = getattr(d, key)
        if names:
            out[key] = list(names)
    card: dict[str, object] = {}
    if d.min_card_mib is not None:
        card["min"] = format_card_mib(d.min_card_mib)
    if d.max_card_mib is not None:
        card["max"] = format_card_mib(d.max_card_mib)
    if card:
        out["card_memory"] = card
    if d.memory_mib is not None:
        out["memory"] = format_mib_exact(d.memory_mib)
    if d.memory_permille is not None:
        out["memory"] = format_permille(d.memory_permille)
    if d.core_permille is not None:
        out["cores"] = format_permille(d.core_permille)
    if d.uuids:
        out["uuids"] = list(d.uuids)
    if d.exclude_uuids:
        out["exclude_uuids"] = list(d.exclude_uuids)
    if d.topology is not Topology.NONE:
        out["topology"] = d.topology.value
    if d.software:
        out["software"] = [str(need) for need in d.software]
    return out
