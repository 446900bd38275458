"""The one typed edge of a placement request: :class:`RequestModel`.

Every front reads a request through this model: the API (``JobIn.request``), the CLI (``xpupool
submit`` and ``xpupool spec``), the server's stored rows and the simulator's trace readers. It takes
the JSON object form and the compact string (``"A100:2 mem=40Gi"``, read by
:func:`~xpupool.model.spec.parse_spec`), so both forms share one set of checks, one OpenAPI schema
and one set of error paths. Strict on write: an unknown key, a wrong type or a bad quantity is a
``ValidationError`` whose path is the offending value (``devices.memroy``, ``devices.software[1]``)
and whose message says why; ``null`` means "not given". Fields hold the parsed value (MiB,
millicores, thousandths of a card) and serialise to the canonical text, so
:meth:`RequestModel.dump` is the stored and shown form. :meth:`RequestModel.to_request` is the only
conversion into the engine's frozen :class:`~xpupool.model.request.Request`.
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Mapping
from dataclasses import replace
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationError,
    model_validator,
)

from xpupool.model.errors import RequestError
from xpupool.model.qos import DEFAULT_QOS, QoS, default_priority
from xpupool.model.quantity import parse_card_range
from xpupool.model.request import (
    MAX_DEVICES_PER_REPLICA,
    MAX_REPLICAS,
    DevicePolicy,
    DeviceRequest,
    Request,
    Topology,
    fields_but,
    parse_software_need,
)
from xpupool.model.request_fields import (
    CardMib,
    CheckpointSignal,
    CpuMilli,
    DeviceMemory,
    DeviceMemoryField,
    DevicePolicyName,
    GraceSeconds,
    IdleStopField,
    KindName,
    LabelName,
    LabelValue,
    MemoryMib,
    MinRunSeconds,
    ModelName,
    NonBlank,
    PartitionName,
    Permille,
    QoSName,
    SiteName,
    SoftwareText,
    SpeedsField,
    TopologyName,
    VendorName,
    or_string,
    parsed,
)
from xpupool.model.spec import parse_spec
from xpupool.model.taint import (
    TaintEffect,
    Toleration,
    TolerationOperator,
    parse_toleration,
    supported_effect,
)
from xpupool.model.validation import field_error, request_error

__all__ = [
    "MAX_SPEC_CHARS",
    "MAX_TOLERATIONS",
    "CardMemory",
    "DeviceMemory",
    "DevicesModel",
    "ReplicaRange",
    "RequestModel",
    "request_from_dict",
    "request_to_dict",
]

INT32 = 1 << 31
MAX_SPEC_CHARS = 2000  # a compact string longer than this is not a request someone wrote
MAX_TOLERATIONS = 64  # more than any pool has taints to tolerate


class _Form(BaseModel):
    """Unknown keys are errors that suggest the closest known key (request bodies are strict)."""

    model_config = ConfigDict(extra="forbid")

    @classmethod
    def _known_keys(cls, data: object) -> Mapping[str, object]:
        if not isinstance(data, Mapping):
            raise field_error("expected an object", data)
        known = list(cls.model_fields)
        for key in data:
            if key not in cls.model_fields:
                close = difflib.get_close_matches(str(key), known, n=1)
                hint = f"did you mean {close[0]!r}? " if close else ""
                reason = f"unknown key; {hint}known: {', '.join(known)}"
                raise field_error(reason, data[key], str(key))
        return data


class CardMemory(_Form):
    """Bounds on the card's marketed size, either or both; compares with the catalog's size."""

    min: CardMib | None = Field(None, description="Smallest acceptable card; null = no bound.")
    max: CardMib | None = Field(None, description="Largest acceptable card; null = no bound.")

    @model_validator(mode="before")
    @classmethod
    def _keys(cls, data: object) -> object:
        return cls._known_keys(data)

    @model_validator(mode="after")
    def _something(self) -> CardMemory:
        if self.min is None and self.max is None:
            raise field_error("give min, max or both", {})
        return self


def _card_from_text(value: object) -> object:
    """``"80GB"`` (exactly), ``"24GB..40GB"``, ``"48GB.."``, ``"..40GB"`` -> a CardMemory."""
    if isinstance(value, str):
        low, high = parsed(lambda path, text: parse_card_range(path, str(text)))(value)
        return CardMemory.model_construct(min=low, max=high)
    if isinstance(value, int | float) and not isinstance(value, bool):
        raise field_error("expected an object with min/max or a range such as '24GB..40GB'", value)
    return value


class ReplicaRange(_Form):
    """An elastic job's size: admitted at ``min`` replicas, grown up to ``max`` while capacity
    is idle and shrunk back towards ``min`` when others need room (docs/jobs.md). Read through
    :func:`_replicas`, which names ``replicas.min`` or ``replicas.max`` in every refusal."""

    min: StrictInt = Field(
        ..., ge=1, le=MAX_REPLICAS, description="Replicas it is admitted with, all or none."
    )
    max: StrictInt = Field(
        ..., ge=1, le=MAX_REPLICAS, description="Most replicas it grows to; at least 'min'."
    )


_REPLICAS_FORMS = "expected a whole number, {'min': 2, 'max': 8} or '2..8'"


def _replica_count(value: object, at: str = "") -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise field_error(_REPLICAS_FORMS if not at else "expected a whole number", value, at)
    if not 1 <= value <= MAX_REPLICAS:
        raise field_error(f"must be between 1 and {MAX_REPLICAS}", value, at)
    return value


def _replicas(value: object) -> object:
    """``replicas`` as a count, or an elastic range: ``{"min": 2, "max": 8}`` or the compact
    string's ``"2..8"``; every refusal names ``replicas``, ``replicas.min`` or ``replicas.max``."""
    if value is None or isinstance(value, ReplicaRange):
        return value
    if isinstance(value, str):
        low, sep, high = value.partition("..")
        if not sep or not low.isdigit() or not high.isdigit():
            raise field_error(_REPLICAS_FORMS, value)
        value = {"min": int(low), "max": int(high)}
    if not isinstance(value, Mapping):
        return _replica_count(value)
    ReplicaRange._known_keys(value)
    for key in ("min", "max"):
        if key not in value:
            raise field_error("required in an elastic range", value, key)
    low_n = _replica_count(value["min"], "min")
    high_n = _replica_count(value["max"], "max")
    if high_n < low_n:
        raise field_error(f"must be at least 'min' ({low_n})", high_n, "max")
    return ReplicaRange.model_construct(min=low_n, max=high_n)


class DevicesModel(_Form):
    """Devices for one replica. Absent: CPU only. Present without ``count``: one device."""

    count: StrictInt | None = Field(
        None,
        ge=0,
        le=MAX_DEVICES_PER_REPLICA,
        description="Devices per replica; null = 1; 0 = CPU only.",
    )
    vendors: list[VendorName] | None = Field(
        None, description="Any-of vendor names or aliases ('nvidia', 'ascend'); empty = any."
    )
    models: list[ModelName] | None = Field(
        None,
        description="Any-of model names, families or aliases ('A100', 'a100-80gb'); '!NAME' "
        "excludes NAME. Each must be known to the catalog or to a node of the pool.",
    )
    exclude_models: list[ModelName] | None = Field(
        None, description="Models never to use; wins over 'models'."
    )
    card_memory: Annotated[CardMemory, BeforeValidator(_card_from_text)] | None = Field(
        None,
        description="Bounds on the card's marketed size.",
        json_schema_extra=or_string("'80GB' (exactly), '24GB..40GB', '48GB..' or '..40GB'."),
    )
    memory: DeviceMemoryField | None = None
    cores: Permille | None = None
    uuids: list[ModelName] | None = Field(
        None, description="Any-of device UUIDs; '!UUID' excludes one; empty = any device."
    )
    exclude_uuids: list[ModelName] | None = Field(
        None, description="Device UUIDs never to use; wins over 'uuids'."
    )
    topology: TopologyName | None = Field(
        None,
        description="'same-link-group' (alias 'nvlink'): all of a replica's devices in one "
        "NVLink/HCCS/xGMI domain; 'same-numa': all on one NUMA node of the host; 'none' or "
        "null: no constraint.",
    )
    software: list[SoftwareText] | None = Field(
        None,
        description="Software the devices must run: 'cuda>=12.1', 'cann>=8.0', 'rocm>=6', "
        "'torch==2.4' (name, operator, version).",
    )
    partition: PartitionName | None = Field(
        None,
        description="A hardware partition profile each device must be, taken whole: a MIG "
        "profile ('3g.40gb', '1g.10gb+me') or an Ascend vNPU template ('vir05_1c_16g'); the "
        "card's model must have it. null = not a partition request.",
    )
    isolated: StrictBool | None = Field(
        None,
        description="true: 'memory' (an amount) asks for a hardware partition holding it, the "
        "smallest profile of the card's model that does, taken whole. null or false: a "
        "software share (or the whole card).",
    )

    @model_validator(mode="before")
    @classmethod
    def _keys(cls, data: object) -> object:
        return cls._known_keys(data)

    @model_validator(mode="after")
    def _excludes(self) -> DevicesModel:
        """``models: ["A100", "!T4"]`` -> models ["A100"], exclude_models ["T4", ...]."""
        for key in ("models", "uuids"):
            include: list[str] = []
            exclude: list[str] = []
            for i, name in enumerate(getattr(self, key) or ()):
                if not name.startswith("!"):
                    include.append(name)
                    continue
                rest = name[1:]
                if not rest or rest != rest.strip() or rest.startswith("!"):
                    raise field_error("expected '!NAME' to exclude NAME", name, f"{key}[{i}]")
                exclude.append(rest)
            for i, name in enumerate(getattr(self, f"exclude_{key}") or ()):
                if name.startswith("!"):
                    reason = f"already an exclusion; write {name[1:]!r}"
                    raise field_error(reason, name, f"exclude_{key}[{i}]")
                exclude.append(name)
            setattr(self, key, include or None)
            setattr(self, f"exclude_{key}", exclude or None)
        return self

    @model_validator(mode="after")
    def _isolated(self) -> DevicesModel:
        if self.isolated and (self.memory is None or self.memory.mib is None):
            raise field_error("needs 'memory' as an amount such as '20Gi'", True, "isolated")
        return self

    def to_devices(self) -> DeviceRequest:
        memory = self.memory or DeviceMemory(None, None)
        card = self.card_memory
        isolated_mib = memory.mib if self.isolated else None
        return DeviceRequest(
            count=1 if self.count is None else self.count,
            partition=self.partition,
            isolated_mib=isolated_mib,
            memory_mib=None if self.isolated else memory.mib,
            memory_permille=memory.permille,
            core_permille=self.cores,
            vendors=tuple(self.vendors or ()),
            models=tuple(self.models or ()),
            exclude_models=tuple(self.exclude_models or ()),
            uuids=tuple(self.uuids or ()),
            exclude_uuids=tuple(self.exclude_uuids or ()),
            min_card_mib=None if card is None else card.min,
            max_card_mib=None if card is None else card.max,
            software=tuple(parse_software_need(t) for t in self.software or ()),
            topology=Topology(self.topology or Topology.NONE),
        )

    @classmethod
    def from_devices(cls, d: DeviceRequest) -> DevicesModel:
        """The canonical form of ``d``: what is not given stays null (left out when dumped)."""
        memory = None
        if d.memory_mib is not None or d.memory_permille is not None:
            memory = DeviceMemory(d.memory_mib, d.memory_permille)
        if d.isolated_mib is not None:
            memory = DeviceMemory(d.isolated_mib, None)
        card = None
        if d.min_card_mib is not None or d.max_card_mib is not None:
            card = CardMemory.model_construct(min=d.min_card_mib, max=d.max_card_mib)
        return cls.model_construct(
            count=d.count,
            vendors=list(d.vendors) or None,
            models=list(d.models) or None,
            exclude_models=list(d.exclude_models) or None,
            card_memory=card,
            memory=memory,
            cores=d.core_permille,
            uuids=list(d.uuids) or None,
            exclude_uuids=list(d.exclude_uuids) or None,
            topology=None if d.topology is Topology.NONE else d.topology.value,
            software=[str(n) for n in d.software] or None,
            partition=d.partition,
            isolated=True if d.isolated_mib is not None else None,
        )


def _operator(path: str, value: object) -> str:
    if not isinstance(value, str):
        raise RequestError(path, value, "expected 'Exists' or 'Equal'")
    try:
        return TolerationOperator(value).value
    except ValueError:
        raise RequestError(path, value, "unknown operator; known: Exists, Equal") from None


def _effect(path: str, value: object) -> str:
    return supported_effect(path, value).value


def _or_text_items(schema: dict[str, Any]) -> None:
    """The tolerations' schema also admits the spec's text per item."""
    for option in schema.get("anyOf", [schema]):
        items = option.get("items")
        if isinstance(items, dict):
            option["items"] = {
                "anyOf": [
                    items,
                    {"type": "string", "description": "'gpu=true:NoSchedule', 'gpu', '*'"},
                ]
            }


def _toleration_from_text(value: object) -> object:
    """``"gpu=true:NoSchedule"`` (the spec's ``tolerate=`` form) -> a TolerationModel."""
    if isinstance(value, str):
        t = parsed(parse_toleration)(value)
        return TolerationModel.from_toleration(t)
    return value


class TolerationModel(_Form):
    """Kubernetes' toleration (``Pod.spec.tolerations[i]``), matched as Kubernetes matches it."""

    key: StrictStr | None = Field(
        None,
        description="The taint key it tolerates; null or empty: every key (operator Exists).",
    )
    operator: Annotated[Literal["Exists", "Equal"], BeforeValidator(parsed(_operator))] | None = (
        Field(
            None, description="'Equal': the key with 'value'; 'Exists': any value; null = 'Equal'."
        )
    )
    value: StrictStr | None = Field(
        None, description="The value with 'Equal'; empty with 'Exists'; null = empty."
    )
    effect: (
        Annotated[Literal["NoSchedule", "PreferNoSchedule"], BeforeValidator(parsed(_effect))]
        | None
    ) = Field(
        None,
        description="'NoSchedule' or 'PreferNoSchedule': taints of that effect only; null: "
        "every effect. NoExecute is refused (xpupool does not evict).",
    )

    @model_validator(mode="before")
    @classmethod
    def _keys(cls, data: object) -> object:
        return cls._known_keys(data)

    @model_validator(mode="after")
    def _rules(self) -> TolerationModel:
        try:
            self.to_toleration()
        except RequestError as exc:
            raise field_error(exc.reason, exc.value, exc.field) from None
        return self

    def to_toleration(self) -> Toleration:
        return Toleration(
            self.key or "",
            TolerationOperator(self.operator or "Equal"),
            self.value or "",
            None if self.effect is None else TaintEffect(self.effect),
        )

    @classmethod
    def from_toleration(cls, t: Toleration) -> TolerationModel:
        """The canonical form of ``t``: the key (when given), the operator, the value (with
        Equal, when not empty) and the effect (when given)."""
        return cls.model_construct(
            key=t.key or None,
            operator=t.operator.value,
            value=t.value or None,
            effect=None if t.effect is None else t.effect.value,
        )


class RequestModel(_Form):
    """A placement request: ``replicas`` copies of (cpu, memory, devices). Also accepted as the
    compact string of docs/request-syntax.md (``"A100:80GB:2 mem=40Gi cuda>=12.4 replicas=2"``)."""

    name: StrictStr | None = Field(None, description="A label; null = the job's name.")
    cpu: CpuMilli | None = Field(None, description="CPU per replica; null = none reserved.")
    memory: MemoryMib | None = Field(None, description="Host memory per replica; null = none.")
    devices: DevicesModel | None = Field(None, description="Devices per replica; null = none.")
    replicas: (
        Annotated[
            Annotated[StrictInt, Field(ge=1, le=MAX_REPLICAS)] | ReplicaRange,
            BeforeValidator(_replicas),
        ]
        | None
    ) = Field(
        None,
        description="Copies of the replica; null = 1. An object {'min': 2, 'max': 8} (or "
        "'2..8') makes the job elastic: admitted at min, grown into idle capacity up to max, "
        "shrunk first when others need room. Its replicas get XPUPOOL_REPLICAS, XPUPOOL_RANK "
        "and XPUPOOL_SIZE_FILE, a file rewritten when the size changes, then SIGUSR1 "
        "(docs/jobs.md, Elastic jobs).",
    )
    gang: StrictBool | None = Field(
        None,
        description="All replicas placed together or none; null = false (the server "
        "admits a multi-replica job as a gang anyway).",
    )
    span_sites: StrictBool | None = Field(
        None,
        description="Let a gang's replicas span sites; null = false: a gang is placed within "
        "one site (replicas that are not a gang go wherever each fits).",
    )
    priority: StrictInt | None = Field(
        None, ge=-INT32, le=INT32 - 1, description="Higher runs first; null = 0."
    )
    queue: NonBlank | None = Field(None, description="Queue; null = the default.")
    node_policy: NonBlank | None = Field(
        None,
        description="Scheduling profile for this request (a profile name); null = the "
        "cluster's default.",
    )
    device_policy: DevicePolicyName | None = Field(
        None,
        description="How cards are picked inside a node: 'binpack' fills the busiest card that "
        "fits, 'spread' the emptiest; null = the profile's.",
    )
    site: Annotated[list[SiteName], BeforeValidator(_one_or_list)] | None = Field(
        None,
        description="Sites the replicas may run in, any-of ('shanghai' or a list); '!NAME' "
        "excludes a site. Null: any site. Each must be a site of the pool.",
    )
    node_selector: dict[LabelName, LabelValue] | None = Field(
        None,
        description="Node labels the replicas' nodes must all carry, label -> value "
        "({'gpu-pool': 'a'}); null: any node.",
    )
    preferred_site: SiteName | None = Field(
        None,
        description="A site to prefer: its nodes score higher, the others still fit (a "
        "profile weighs it with the 'site' scorer). Null: no preference.",
    )
    data: SiteName | None = Field(
        None,
        description="A dataset of the sites file the job reads ('imagenet'): a site is chosen "
        "weighing how long the data takes to reach it (docs/sites.md). Null: none.",
    )
    tolerations: list[Annotated[TolerationModel, BeforeValidator(_toleration_from_text)]] | None = (
        Field(
            None,
            max_length=MAX_TOLERATIONS,
            description="Node taints the replicas tolerate, any-of, in Kubernetes' form "
            "([{'key': 'gpu', 'operator': 'Exists', 'effect': 'NoSchedule'}]); an item may also be "
            "the spec's text ('gpu=true:NoSchedule', 'gpu', '*'). Null: none (nodes with a "
            "NoSchedule taint are not used).",
            json_schema_extra=_or_text_items,
        )
    )
    kind: KindName | None = Field(
        None,
        description="The job's type ('resnet50', 'llm-decode'): speeds are learned and "
        "estimated per kind (docs/placement-policy.md). Null: the image, else the model name.",
    )
    speed: SpeedsField | None = Field(
        None,
        description="Relative speed per card model, as the job declares it ('A100:1.0,910B3:0.7'"
        "); the 'throughput' policy prefers the cards where the job runs best. Null: none (the "
        "job is packed as by binpack).",
    )
    grace: GraceSeconds | None = Field(
        None,
        description="Seconds between SIGTERM and SIGKILL when the job is stopped ('30s', '2m' "
        "or a number of seconds; at most 1h); null = the server's default.",
    )
    checkpoint_signal: CheckpointSignal | None = Field(
        None,
        description="A signal sent before SIGTERM when the job is preempted or stopped by the "
        "plane, so it can save its state ('USR1'; docs/jobs.md 'Stopping well'); null = none.",
    )
    min_run: MinRunSeconds | None = Field(
        None,
        description="Not preempted before it has run this long ('10m'), unless the preemptor's "
        "queue has preempts_min_run; null = preemptible at once.",
    )
    idle_stop: IdleStopField | None = Field(
        None,
        description="Stop the job once every card it holds whole stayed under this utilisation "
        "for this long ('5%/30m'; docs/jobs.md 'Stopping well'): it ends failed, with the "
        "reason. Null = never.",
    )
    qos: QoSName | None = Field(
        None,
        description="QoS class: 'guaranteed' (never preempted, its priority never lowered, its "
        "card shares only within a card's physical capacity), 'burstable' (as a job without a "
        "class) or 'best-effort' (preempted first: the lowest priority unless 'priority' is "
        "given; may use over-committed cards); null = burstable (docs/jobs.md, QoS classes).",
    )
    _request: Request | None = PrivateAttr(None)

    @model_validator(mode="before")
    @classmethod
    def _forms(cls, data: object) -> object:
        if isinstance(data, str):
            if len(data) > MAX_SPEC_CHARS:
                raise field_error(f"longer than {MAX_SPEC_CHARS} characters", data[:100] + "...")
            try:
                return cls.from_request(parse_spec(data)).dump()
            except RequestError as exc:
                raise field_error(exc.reason, exc.value, exc.field) from None
        if not isinstance(data, Mapping):
            raise field_error("expected an object or a compact string such as 'A100:2'", data)
        return cls._known_keys(data)

    @model_validator(mode="after")
    def _engine_checks(self) -> RequestModel:
        """The engine record's own cross-field rules (a count of 0 with shares, card bounds the
        wrong way round), reported at their path."""
        try:
            self._request = self._build()
        except RequestError as exc:
            raise field_error(exc.reason, exc.value, exc.field) from None
        return self

    def to_request(self) -> Request:
        """The engine's request: the one conversion from the edge into the engine's form."""
        if self._request is None:
            self._request = self._build()
        return self._request

    def _build(self) -> Request:
        return Request(
            name=self.name or "",
            cpu_milli=self.cpu or 0,
            memory_mib=self.memory or 0,
            devices=DeviceRequest() if self.devices is None else self.devices.to_devices(),
            replicas=1 if self.replicas is None else self._min_replicas(),
            gang=bool(self.gang),
            span_sites=bool(self.span_sites),
            priority=default_priority(self._qos(), self.priority),
            queue="default" if self.queue is None else self.queue,
            node_policy=self.node_policy,
            device_policy=None if self.device_policy is None else DevicePolicy(self.device_policy),
            sites=tuple(x for x in self.site or () if not x.startswith("!")),
            exclude_sites=tuple(x[1:] for x in self.site or () if x.startswith("!")),
            node_selector=tuple((self.node_selector or {}).items()),
            preferred_site=self.preferred_site,
            tolerations=tuple(t.to_toleration() for t in self.tolerations or ()),
            kind=self.kind,
            speeds=self.speed or (),
            data=self.data,
            grace_s=self.grace,
            checkpoint_signal=self.checkpoint_signal,
            min_run_s=self.min_run,
            idle_stop=self.idle_stop,
            max_replicas=self.replicas.max if isinstance(self.replicas, ReplicaRange) else None,
            qos=self._qos(),
        )

    def _qos(self) -> QoS:
        return DEFAULT_QOS if self.qos is None else QoS(self.qos)

    def _min_replicas(self) -> int:
        r = self.replicas
        return r.min if isinstance(r, ReplicaRange) else (r or 1)

    @classmethod
    def from_request(cls, req: Request) -> RequestModel:
        """The canonical form of ``req``: defaults are null and left out of :meth:`dump`."""
        model = cls.model_construct(
            name=req.name or None,
            cpu=req.cpu_milli or None,
            memory=req.memory_mib or None,
            devices=None
            if req.devices == DeviceRequest()
            else DevicesModel.from_devices(req.devices),
            replicas=_replicas_of(req),
            gang=True if req.gang else None,
            span_sites=True if req.span_sites else None,
            priority=None if req.priority == default_priority(req.qos, None) else req.priority,
            queue=None if req.queue == "default" else req.queue,
            node_policy=req.node_policy,
            device_policy=None if req.device_policy is None else req.device_policy.value,
            site=[*req.sites, *(f"!{x}" for x in req.exclude_sites)] or None,
            node_selector=dict(req.node_selector) or None,
            preferred_site=req.preferred_site,
            tolerations=[TolerationModel.from_toleration(t) for t in req.tolerations] or None,
            kind=req.kind,
            speed=req.speeds or None,
            data=req.data,
            grace=req.grace_s,
            checkpoint_signal=req.checkpoint_signal,
            min_run=req.min_run_s,
            idle_stop=req.idle_stop,
            qos=None if req.qos is DEFAULT_QOS else req.qos.value,
        )
        model._request = req
        return model

    def dump(self) -> dict[str, object]:
        """The canonical JSON form: defaults left out, fixed key order, quantities as exact text."""
        return self.model_dump(mode="json", exclude_none=True)


SPEC_READS_KEPT = 1024
"""Distinct compact strings whose reading :func:`read_spec` keeps."""


def read_spec(text: str) -> RequestModel:
    """The request model of the compact string ``text``, as ``RequestModel.model_validate(text)``
    gives it, read once per distinct text of the last ``SPEC_READS_KEPT``: reading a string
    parses it, writes it out and validates that form again, a large part of what a submission
    costs the app (issue 25; docs/benchmarks.md and its history), and clients send the same few
    strings again and again (a sweep, a template, the CLI's ``xpupool submit A100:2``). Each call
    returns its own copy, which its caller may change; a text that fails raises the same
    ``ValidationError`` each time (failures are not kept)."""
    return _read_spec(text).model_copy()


@functools.lru_cache(maxsize=SPEC_READS_KEPT)
def _read_spec(text: str) -> RequestModel:
    return RequestModel.model_validate(text)


def _replicas_of(req: Request) -> int | ReplicaRange | None:
    """The canonical ``replicas``: null for 1, the count, or the elastic range."""
    if req.max_replicas is not None:
        return ReplicaRange.model_construct(min=req.replicas, max=req.max_replicas)
    return None if req.replicas == 1 else req.replicas


def _one_or_list(value: object) -> object:
    """``site: "shanghai"`` is read as ``["shanghai"]``."""
    return [value] if isinstance(value, str) else value


def request_from_dict(data: object) -> Request:
    """The engine request for a JSON (or compact string) form; raises :class:`RequestError`
    whose ``field`` is the offending path (``devices.memory``; ``request`` for the whole)."""
    try:
        return RequestModel.model_validate(data).to_request()
    except ValidationError as exc:
        raise request_error(exc, "request") from None


def request_to_dict(req: Request) -> dict[str, object]:
    """The canonical JSON form of ``req``; ``request_from_dict(request_to_dict(r)) == r`` for
    every valid ``r`` whose model names and UUIDs are non-empty, without surrounding whitespace
    and without a leading ``!``.

    What is written for everything but the name is kept for the last ``FORMS_KEPT`` requests
    that differ in more than their names, their devices told apart by identity (jobs read from
    the same compact string share one, :func:`read_spec`; two equal device requests may be
    written differently, ``cuda>=0`` and ``cuda>=0.0``): writing it was a large part of the
    submission service's time (issue 25; docs/benchmarks.md and its history). The name, the
    model's first field, comes first as in :meth:`RequestModel.dump`; each call returns its own
    dict."""
    unnamed = _unnamed_form(_Unnamed(req))
    out: dict[str, object] = {"name": req.name} if req.name else {}
    for key, value in unnamed.items():
        out[key] = _copied(value)
    return out


FORMS_KEPT = 1024
"""Requests (but their names) whose written form :func:`request_to_dict` keeps."""

_BUT_NAME_AND_DEVICES = fields_but("name", "devices")


class _Unnamed:
    """A request as a key of what is written for it but its name: its devices by identity (a
    key holds them, so the identity is not reused while kept), the other fields by value."""

    __slots__ = ("key", "req")

    def __init__(self, req: Request) -> None:
        self.req = req
        self.key = (id(req.devices), _BUT_NAME_AND_DEVICES(req))

    def __hash__(self) -> int:
        return hash(self.key)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, _Unnamed)
            and self.req.devices is other.req.devices
            and self.key == other.key
        )


@functools.lru_cache(maxsize=FORMS_KEPT)
def _unnamed_form(unnamed: _Unnamed) -> dict[str, object]:
    return RequestModel.from_request(replace(unnamed.req, name="")).dump()


def _copied(value: object) -> object:
    """``value`` (JSON: dicts, lists, scalars) with its own dicts and lists."""
    if isinstance(value, dict):
        return {k: _copied(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copied(v) for v in value]
    return value
