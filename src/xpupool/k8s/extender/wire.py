"""The kube-scheduler extender wire format, ``k8s.io/kube-scheduler/extender/v1``, exactly.

Written from ``extender/v1/types.go`` of github.com/kubernetes/kube-scheduler at v0.36.3 (commit
b38e356654c4ff006c3dee156acb29b4d3eb023d, the staging copy of kubernetes v1.36.3). None of those
structs has a json tag, so Go's ``encoding/json`` uses the field names as keys (``Pod``,
``NodeNames``, ``FailedAndUnresolvableNodes``), never leaves a field out (no ``omitempty``), writes
a nil pointer, slice or map as ``null`` and sorts map keys. kube-scheduler encodes its arguments
with ``json.NewEncoder`` and decodes our answers with ``json.NewDecoder`` (pkg/scheduler/extender.go):
on read Go matches keys case-insensitively (an exact match first) and ignores unknown keys, and so
do we. Pod and Node bodies stay raw JSON objects here; ``pod_request.py`` reads pods. A body that
is not valid JSON, too large, too deep or of the wrong shape raises :class:`WireError` naming the
field (``ExtenderArgs.NodeNames[2]``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, TypeVar

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    RootModel,
    StrictInt,
    StrictStr,
    ValidationError,
    ValidationInfo,
    field_serializer,
    model_validator,
)

from xpupool.k8s.codec.go_json import go_json
from xpupool.model.errors import RequestError
from xpupool.model.validation import request_error

__all__ = [
    "MAX_BODY_BYTES",
    "MAX_EXTENDER_PRIORITY",
    "MIN_EXTENDER_PRIORITY",
    "ExtenderArgs",
    "ExtenderBindingArgs",
    "ExtenderBindingResult",
    "ExtenderFilterResult",
    "ExtenderPreemptionArgs",
    "ExtenderPreemptionResult",
    "HostPriority",
    "HostPriorityList",
    "MetaPod",
    "MetaVictims",
    "Victims",
    "WireError",
    "decode",
    "encode",
]

# types.go: MinExtenderPriority int64 = 0, MaxExtenderPriority int64 = 10.
MIN_EXTENDER_PRIORITY = 0
MAX_EXTENDER_PRIORITY = 10
# A body larger than this is refused before parsing: 5,000 full Node objects (an extender that is
# not nodeCacheCapable) stay well under it; anything bigger is not a scheduler talking.
MAX_BODY_BYTES = 64 << 20
_INT64 = 1 << 63

JsonObject = dict[str, Any]
M = TypeVar("M", bound=BaseModel)


class WireError(RequestError):
    """A body kube-scheduler (or we) could not have produced: ``field`` is the path in Go's names
    (``ExtenderBindingArgs.PodUID``), ``value`` the offending value, ``reason`` why."""


def _go_string(value: object) -> object:
    """Go decodes JSON ``null`` into a string field as no change: the empty string."""
    return "" if value is None else value


def _go_int(value: object) -> object:
    """Go decodes ``null`` into an int64 field as no change (0); ``1.0`` is refused, as Go does."""
    return 0 if value is None else value


GoString = Annotated[StrictStr, BeforeValidator(_go_string)]
GoInt64 = Annotated[StrictInt, BeforeValidator(_go_int), Field(ge=-_INT64, lt=_INT64)]
NodeName = Annotated[StrictStr, Field(max_length=253)]


class _GoStruct(BaseModel):
    """A Go struct without json tags: keys are the field names; read case-insensitively."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore", frozen=True)
    _folded: ClassVar[dict[str, str]] = {}

    @model_validator(mode="before")
    @classmethod
    def _go_keys(cls, data: object, info: ValidationInfo) -> object:
        if not isinstance(data, Mapping):
            raise ValueError("expected a JSON object")
        if not (info.context or {}).get("wire"):
            return data  # built in Python, by field name or alias
        aliases = {f.alias or name: name for name, f in cls.model_fields.items()}
        out: dict[str, object] = {}
        exact: set[str] = set()
        for key, value in data.items():
            if not isinstance(key, str):
                continue
            if key in aliases:
                out[key] = value
                exact.add(key)
                continue
            for alias in aliases:  # Go: an exact match wins, else a case-insensitive one
                if alias.lower() == key.lower() and alias not in exact:
                    out[alias] = value
        return out


class MetaPod(_GoStruct):
    """``MetaPod``: a pod's identity only (sent when the extender is nodeCacheCapable)."""

    uid: GoString = Field(default="", alias="UID")


class MetaVictims(_GoStruct):
    """``MetaVictims``: pods to preempt on one node, by UID, and the PDB violations that costs."""

    pods: list[MetaPod | None] | None = Field(default=None, alias="Pods")
    num_pdb_violations: GoInt64 = Field(default=0, alias="NumPDBViolations")


class Victims(_GoStruct):
    """``Victims``: whole pod objects to preempt (sent when not nodeCacheCapable)."""

    pods: list[JsonObject | None] | None = Field(default=None, alias="Pods")
    num_pdb_violations: GoInt64 = Field(default=0, alias="NumPDBViolations")


class ExtenderArgs(_GoStruct):
    """``ExtenderArgs``, the body of filter and prioritize. ``node_names`` is set when the
    extender is nodeCacheCapable, ``nodes`` (a NodeList object) otherwise; the other is null."""

    pod: JsonObject | None = Field(default=None, alias="Pod")
    nodes: JsonObject | None = Field(default=None, alias="Nodes")
    node_names: list[NodeName] | None = Field(default=None, alias="NodeNames")


class ExtenderFilterResult(_GoStruct):
    """``ExtenderFilterResult``. ``failed_and_unresolvable_nodes`` takes precedence over
    ``failed_nodes`` (preemption would not help there). ``error`` non-empty: a logical failure,
    still sent with HTTP 200; kube-scheduler then fails the pod's scheduling attempt."""

    nodes: JsonObject | None = Field(default=None, alias="Nodes")
    node_names: list[NodeName] | None = Field(default=None, alias="NodeNames")
    failed_nodes: dict[NodeName, GoString] | None = Field(default=None, alias="FailedNodes")
    failed_and_unresolvable_nodes: dict[NodeName, GoString] | None = Field(
        default=None, alias="FailedAndUnresolvableNodes"
    )
    error: GoString = Field(default="", alias="Error")

    @field_serializer("failed_nodes", "failed_and_unresolvable_nodes")
    def _sorted(self, value: dict[str, str] | None) -> dict[str, str] | None:
        return None if value is None else dict(sorted(value.items()))  # Go sorts map keys


class HostPriority(_GoStruct):
    """``HostPriority``: one node's score, an integer from 0 to ``MaxExtenderPriority`` (10)."""

    host: GoString = Field(default="", alias="Host")
    score: Annotated[
        StrictInt,
        BeforeValidator(_go_int),
        Field(ge=MIN_EXTENDER_PRIORITY, le=MAX_EXTENDER_PRIORITY),
    ] = Field(default=0, alias="Score")


class HostPriorityList(RootModel[list[HostPriority] | None]):
    """``HostPriorityList``, the answer to prioritize: a JSON array (``null`` when nil)."""

    model_config = ConfigDict(frozen=True)


class ExtenderBindingArgs(_GoStruct):
    """``ExtenderBindingArgs``, the body of bind."""

    pod_name: GoString = Field(default="", alias="PodName")
    pod_namespace: GoString = Field(default="", alias="PodNamespace")
    pod_uid: GoString = Field(default="", alias="PodUID")
    node: GoString = Field(default="", alias="Node")


class ExtenderBindingResult(_GoStruct):
    """``ExtenderBindingResult``: ``error`` empty means bound."""

    error: GoString = Field(default="", alias="Error")


class ExtenderPreemptionArgs(_GoStruct):
    """``ExtenderPreemptionArgs``: only ``node_name_to_meta_victims`` is set when the extender is
    nodeCacheCapable, only ``node_name_to_victims`` otherwise."""

    pod: JsonObject | None = Field(default=None, alias="Pod")
    node_name_to_victims: dict[NodeName, Victims | None] | None = Field(
        default=None, alias="NodeNameToVictims"
    )
    node_name_to_meta_victims: dict[NodeName, MetaVictims | None] | None = Field(
        default=None, alias="NodeNameToMetaVictims"
    )

    @field_serializer("node_name_to_victims", "node_name_to_meta_victims")
    def _sorted(self, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return None if value is None else dict(sorted(value.items()))


class ExtenderPreemptionResult(_GoStruct):
    """``ExtenderPreemptionResult``: the victims the extender accepts, per node."""

    node_name_to_meta_victims: dict[NodeName, MetaVictims | None] | None = Field(
        default=None, alias="NodeNameToMetaVictims"
    )

    @field_serializer("node_name_to_meta_victims")
    def _sorted(self, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return None if value is None else dict(sorted(value.items()))


def decode(kind: type[M], body: bytes | str) -> M:
    """Parse ``body`` as ``kind`` the way Go's decoder would; raises :class:`WireError`.

    Refused: more than :data:`MAX_BODY_BYTES`, invalid UTF-8 or JSON, nesting deeper than Python
    can parse, a top-level value of the wrong type, a field of the wrong type or range.
    """
    root = kind.__name__
    if len(body) > MAX_BODY_BYTES:
        raise WireError(root, f"{len(body)} bytes", f"larger than {MAX_BODY_BYTES} bytes")
    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise WireError(root, _preview(body), f"not valid JSON: {exc}") from None
    try:
        return kind.model_validate(data, context={"wire": True})
    except ValidationError as exc:
        err = request_error(exc, root)
        field = err.field if err.field == root else f"{root}.{err.field}".replace(".[", "[")
        raise WireError(_go_path(field), err.value, err.reason) from None


def encode(message: BaseModel) -> bytes:
    """``message`` as Go's ``json.Marshal`` writes it: declaration order, no spaces, nil as
    ``null``, map keys sorted, ``<``, ``>``, ``&``, U+2028 and U+2029 escaped."""
    if isinstance(message, HostPriorityList):  # one entry per node: no model_dump per entry
        root = message.root
        rows = None if root is None else [{"Host": h.host, "Score": h.score} for h in root]
        return go_json(rows).encode()
    data = message.model_dump(mode="json", by_alias=True)
    return go_json(data).encode()


def _go_path(path: str) -> str:
    """pydantic's snake_case field names back to Go's (``node_names`` -> ``NodeNames``)."""
    parts = []
    for part in path.split("."):
        head, bracket, rest = part.partition("[")
        go = _GO_NAMES.get(head, head)
        parts.append(go + bracket + rest)
    return ".".join(parts)


def _preview(body: bytes | str) -> str:
    text = body[:80].decode("utf-8", "replace") if isinstance(body, bytes) else body[:80]
    return text + ("..." if len(body) > 80 else "")


_GO_NAMES: dict[str, str] = {
    name: field.alias
    for model in (
        ExtenderArgs,
        ExtenderFilterResult,
        HostPriority,
        ExtenderBindingArgs,
        ExtenderBindingResult,
        ExtenderPreemptionArgs,
        ExtenderPreemptionResult,
        Victims,
        MetaVictims,
        MetaPod,
    )
    for name, field in model.model_fields.items()
    if field.alias
}
