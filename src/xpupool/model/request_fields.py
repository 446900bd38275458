"""The kinds of field a request is made of, each parsed, checked, serialised and documented once.

A quantity field holds the parsed value (MiB, millicores, thousandths of a card) after reading
the text people write (``"16Gi"``, ``"500m"``, ``"50%"``) with ``model/quantity.py``; it serialises
back to the canonical text, and its JSON schema describes the text, not the integer. A parser's
:class:`~xpupool.model.errors.RequestError` becomes a pydantic error at the field (:func:`parsed`),
so every error names its path. ``request_model.py`` builds the request from these.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal, NamedTuple, TypeVar

from pydantic import AfterValidator, BeforeValidator, PlainSerializer, StrictStr, WithJsonSchema

from xpupool.model.errors import RequestError
from xpupool.model.qos import parse_qos
from xpupool.model.quantity import (
    format_card_mib,
    format_cpu_milli,
    format_mib_exact,
    format_permille,
    parse_card_mib,
    parse_cpu_milli,
    parse_device_memory,
    parse_memory_mib,
    parse_percent_permille,
)
from xpupool.model.request import (
    check_label,
    check_partition_name,
    check_site_name,
    parse_device_policy,
    parse_software_need,
    parse_topology,
)
from xpupool.model.speeds import check_kind, format_speeds, parse_speeds
from xpupool.model.stopping import (
    MAX_GRACE_S,
    MAX_MIN_RUN_S,
    IdleStop,
    format_duration,
    parse_checkpoint_signal,
    parse_duration,
    parse_idle_stop,
)
from xpupool.model.validation import field_error
from xpupool.model.vendor import vendor_key

_T = TypeVar("_T")


def parsed(parse: Callable[[str, object], _T]) -> Callable[[object], _T]:
    """A before-validator from one of the model's parsers: its RequestError becomes a pydantic
    error at the field (``at`` carries a sub-path such as ``min`` of a card range)."""

    def check(value: object) -> _T:
        try:
            return parse("", value)
        except RequestError as exc:
            raise field_error(exc.reason, exc.value, exc.field.lstrip(".")) from None

    return check


def _text_schema(description: str, numbers: bool = True) -> WithJsonSchema:
    if not numbers:
        return WithJsonSchema({"type": "string", "description": description})
    kinds = [{"type": "string"}, {"type": "number"}]
    return WithJsonSchema({"anyOf": kinds, "description": description})


class DeviceMemory(NamedTuple):
    """Memory per device: an amount (``mib``) or a share of the card (``permille``), one of them."""

    mib: int | None
    permille: int | None


def _format_device_memory(m: DeviceMemory) -> str:
    return format_mib_exact(m.mib) if m.mib is not None else format_permille(m.permille or 0)


def _device_memory(path: str, value: object) -> DeviceMemory:
    return DeviceMemory(*parse_device_memory(path, value))


def _nonblank(text: str) -> str:
    if not text.strip():
        raise field_error("must not be empty", text)
    return text


def _name(text: str) -> str:
    """A model name or UUID: non-empty, no surrounding whitespace (a likely copy-paste slip)."""
    if text != text.strip():
        raise field_error("leading or trailing whitespace", text)
    return _nonblank(text)


CpuMilli = Annotated[
    int,
    BeforeValidator(parsed(parse_cpu_milli)),
    PlainSerializer(format_cpu_milli, return_type=str),
    _text_schema("CPU per replica: cores as '4', '1.5' or 2, or millicores as '500m'."),
]
MemoryMib = Annotated[
    int,
    BeforeValidator(parsed(parse_memory_mib)),
    PlainSerializer(format_mib_exact, return_type=str),
    _text_schema(
        "Host memory per replica: '16Gi', '512Mi' (G, GB, Gi, GiB all mean GiB); a number is MiB."
    ),
]
DeviceMemoryField = Annotated[
    DeviceMemory,
    BeforeValidator(parsed(_device_memory)),
    PlainSerializer(_format_device_memory, return_type=str),
    _text_schema(
        "Memory per device: an amount ('40Gi', a number is MiB) or a share of the card ('50%'). "
        "Not given: the whole card, or the share in 'cores'."
    ),
]
Permille = Annotated[
    int,
    BeforeValidator(parsed(parse_percent_permille)),
    PlainSerializer(format_permille, return_type=str),
    _text_schema("Compute per device as a share of the card: '50%' (0 < share <= 100%)."),
]
CardMib = Annotated[
    int,
    BeforeValidator(parsed(parse_card_mib)),
    PlainSerializer(format_card_mib, return_type=str),
    _text_schema(
        "A card's marketed size with a unit: '80GB' (GB, G, Gi, GiB all mean GiB).", False
    ),
]
ModelName = Annotated[StrictStr, AfterValidator(_name)]


def _site(path: str, value: object) -> str:
    """A site in a request: a name, or ``!NAME`` (in the ``site`` list) to exclude one."""
    text = str(value)
    if text.startswith("!"):
        return "!" + check_site_name(path, text[1:])
    return check_site_name(path, text)


def _label(path: str, value: object) -> str:
    check_label(path, value, "x")
    return str(value)


def _label_value(path: str, value: object) -> str:
    check_label(path, "x", value)
    return str(value)


SiteName = Annotated[StrictStr, AfterValidator(parsed(_site))]
LabelName = Annotated[StrictStr, AfterValidator(parsed(_label))]
LabelValue = Annotated[StrictStr, AfterValidator(parsed(_label_value))]
NonBlank = Annotated[StrictStr, AfterValidator(_nonblank)]
VendorName = Annotated[StrictStr, AfterValidator(parsed(lambda p, v: vendor_key(str(v), p)))]
SoftwareText = Annotated[
    StrictStr, AfterValidator(parsed(lambda p, t: str(parse_software_need(str(t), p))))
]
TopologyName = Annotated[
    Literal["none", "same-link-group", "same-numa"],
    BeforeValidator(parsed(lambda p, v: parse_topology(p, v).value)),
]
PartitionName = Annotated[
    StrictStr, AfterValidator(parsed(lambda p, v: check_partition_name(p, v)))
]
DevicePolicyName = Annotated[
    Literal["binpack", "spread"],
    BeforeValidator(parsed(lambda p, v: parse_device_policy(p, v).value)),
]


SpeedsField = Annotated[
    tuple[tuple[str, float], ...],
    BeforeValidator(parsed(parse_speeds)),
    PlainSerializer(format_speeds, return_type=str),
    _text_schema(
        "Relative speed per card model: 'A100:1.0,910B3:0.7' or {'A100': 1.0, '910B3': 0.7}; "
        "only ratios matter.",
        False,
    ),
]
KindName = Annotated[StrictStr, AfterValidator(parsed(check_kind))]
GraceSeconds = Annotated[
    float,
    BeforeValidator(parsed(lambda p, v: parse_duration(p, v, MAX_GRACE_S))),
    PlainSerializer(format_duration, return_type=str),
    _text_schema("A duration: '30s', '2m', or a number of seconds."),
]
IdleStopField = Annotated[
    IdleStop,
    BeforeValidator(parsed(parse_idle_stop)),
    PlainSerializer(IdleStop.text, return_type=str),
    _text_schema("A utilisation and a duration: '5%/30m'."),
]
MinRunSeconds = Annotated[
    float,
    BeforeValidator(parsed(lambda p, v: parse_duration(p, v, MAX_MIN_RUN_S))),
    PlainSerializer(format_duration, return_type=str),
    _text_schema("A duration: '10m', '1h', or a number of seconds."),
]
CheckpointSignal = Annotated[StrictStr, AfterValidator(parsed(parse_checkpoint_signal))]
QoSName = Annotated[
    Literal["guaranteed", "burstable", "best-effort"],
    BeforeValidator(parsed(lambda p, v: parse_qos(p, v).value)),
]


def or_string(description: str) -> Callable[[dict[str, Any]], None]:
    """A field's schema also admits the string form (``card_memory: "24GB..40GB"``)."""

    def extend(schema: dict[str, Any]) -> None:
        schema.setdefault("anyOf", [])
        schema["anyOf"].append({"type": "string", "description": description})

    return extend
