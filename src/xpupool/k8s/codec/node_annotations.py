"""xpupool's own Node annotations: the devices the node agent found, and its heartbeat.

``xpupool.io/devices`` holds ``{"version": 1, "devices": [...]}``, each device in the one wire form
every other front uses (``DeviceIn`` of ``server/schemas/agent_protocol.py``: what ``xpupool
agent`` registers with the embedded server), so a card reads the same whether it came from a
probe, the REST API or a Node. ``xpupool.io/heartbeat`` is the time of the agent's last pass,
RFC 3339 in UTC, as Kubernetes writes its own times (``metav1.Time``: ``2026-11-27T05:10:45Z``).

The text is deterministic (sorted keys, devices in index order, no spaces), so the agent compares
texts to decide whether a patch is needed. Reading is lenient on unknown device fields (a newer
agent must not break an older extender, STYLE.md section 4) and strict on everything else: anyone
who may patch a Node can write these annotations, so the text is bounded before it is parsed and
every error names the annotation and the path inside it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from datetime import UTC, datetime

from pydantic import ValidationError

from xpupool.model.errors import RequestError
from xpupool.server.schemas.agent_protocol import DeviceIn

DEVICES_KEY = "xpupool.io/devices"
HEARTBEAT_KEY = "xpupool.io/heartbeat"
ANNOTATION_PREFIX = "xpupool.io/"  # every key the node agent owns starts with it
FORMAT_VERSION = 1
MAX_DEVICES = 256  # as NodeIn.devices
# Kubernetes caps all of an object's annotations together at 256 KiB
# (apimachinery pkg/api/validation/objectmeta.go TotalAnnotationSizeLimitB); half of it for ours
# leaves room for HAMi's and everyone else's. 256 devices of ~400 characters fit in 100 KiB.
MAX_DEVICES_CHARS = 128 * 1024
MAX_HEARTBEAT_CHARS = 64

_FIELDS = frozenset(DeviceIn.model_fields)
_RFC3339 = re.compile(
    r"\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})\Z", re.ASCII
)


def _where(path: str = "") -> str:
    return f"metadata.annotations[{DEVICES_KEY}]{path}"


def _short(text: str, limit: int = 80) -> str:
    """The start of a hostile value, for an error message that stays small."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def encode_devices(devices: Iterable[DeviceIn]) -> str:
    """The annotation text for ``devices`` (ordered by index, then UUID).

    Raises ``RequestError`` when there are more than ``MAX_DEVICES`` or the text would pass
    ``MAX_DEVICES_CHARS``: the apiserver would refuse the whole patch, heartbeat included.
    """
    ordered = sorted(devices, key=lambda d: (d.index, d.uuid))
    if len(ordered) > MAX_DEVICES:
        raise RequestError(_where(".devices"), len(ordered), f"at most {MAX_DEVICES} devices")
    body = {"version": FORMAT_VERSION, "devices": [d.model_dump(mode="json") for d in ordered]}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    if len(text) > MAX_DEVICES_CHARS:
        raise RequestError(
            _where(), f"{len(text)} characters", f"longer than {MAX_DEVICES_CHARS} characters"
        )
    return text


def decode_devices(text: object) -> list[DeviceIn]:
    """The devices of an annotation value, validated as the REST API validates a registration.

    Raises ``RequestError`` whose ``field`` is the path inside the annotation
    (``metadata.annotations[xpupool.io/devices].devices[2].memory_mib``): too long, not JSON, too
    deeply nested, another version, a wrong type, a bad device, a duplicate UUID. Unknown keys of
    a device are dropped (a newer agent's fields); unknown top-level keys are errors.
    """
    if not isinstance(text, str):
        raise RequestError(_where(), type(text).__name__, "expected a string")
    if len(text) > MAX_DEVICES_CHARS:
        raise RequestError(
            _where(), f"{len(text)} characters", f"longer than {MAX_DEVICES_CHARS} characters"
        )
    try:
        data = json.loads(text)
    except RecursionError:
        raise RequestError(_where(), _short(text), "nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, and ints over Python's digit limit
        raise RequestError(_where(), _short(text), f"not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise RequestError(_where(), _short(text), 'expected {"version": 1, "devices": [...]}')
    unknown = sorted(set(data) - {"version", "devices"})
    if unknown:
        raise RequestError(_where(f".{unknown[0]}"), data[unknown[0]], "unknown key")
    version = data.get("version")
    if version != FORMAT_VERSION or isinstance(version, bool):
        raise RequestError(_where(".version"), version, f"only version {FORMAT_VERSION} is known")
    entries = data.get("devices")
    if not isinstance(entries, list):
        raise RequestError(_where(".devices"), type(entries).__name__, "expected a list")
    if len(entries) > MAX_DEVICES:
        raise RequestError(_where(".devices"), len(entries), f"at most {MAX_DEVICES} devices")
    out: list[DeviceIn] = []
    seen: set[str] = set()
    for i, entry in enumerate(entries):
        where = f".devices[{i}]"
        if not isinstance(entry, dict):
            raise RequestError(_where(where), type(entry).__name__, "expected an object")
        try:
            device = DeviceIn.model_validate({k: v for k, v in entry.items() if k in _FIELDS})
        except ValidationError as exc:
            err = exc.errors()[0]
            loc = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err["loc"])
            raise RequestError(_where(where + loc), err.get("input"), err["msg"]) from None
        if device.uuid in seen:
            raise RequestError(_where(f"{where}.uuid"), device.uuid, "duplicate UUID")
        seen.add(device.uuid)
        out.append(device)
    return out


def encode_heartbeat(at: datetime) -> str:
    """``at`` as RFC 3339 in UTC to the second (``2026-11-27T05:10:45Z``); a naive time is UTC."""
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def decode_heartbeat(text: object) -> datetime:
    """The time of a heartbeat annotation (any RFC 3339 offset), timezone-aware.

    Raises ``RequestError`` naming the annotation for anything that is not an RFC 3339 time.
    """
    return parse_rfc3339(f"metadata.annotations[{HEARTBEAT_KEY}]", text)


def parse_rfc3339(field: str, text: object) -> datetime:
    """``text`` as Go's ``time.Parse(time.RFC3339, ...)`` reads it (any offset, ``Z``, up to nine
    fraction digits), timezone-aware; ``field`` names where it came from in the ``RequestError``
    raised for anything else. Shared by every annotation that carries a Go-written time."""
    if not isinstance(text, str):
        raise RequestError(field, type(text).__name__, "expected a string")
    if len(text) > MAX_HEARTBEAT_CHARS or not _RFC3339.match(text):
        raise RequestError(
            field, _short(text), "expected an RFC 3339 time such as 2026-11-27T05:10:45Z"
        )
    fixed = text.upper().replace("Z", "+00:00")
    head, dot, rest = fixed.partition(".")
    if dot:  # Python takes at most 6 fraction digits; RFC 3339 allows more (Go writes 9)
        digits = re.match(r"\d+", rest)
        assert digits is not None  # the pattern above guarantees digits after the dot
        fixed = f"{head}.{digits.group()[:6].ljust(6, '0')}{rest[digits.end() :]}"
    try:
        return datetime.fromisoformat(fixed)
    except ValueError as exc:  # 2026-13-45T...: the right shape, not a date
        raise RequestError(field, _short(text), f"not a valid time: {exc}") from None
