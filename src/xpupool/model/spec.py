"""The compact CLI text form of a placement request: ``nvidia:A100,H100:80GB:2 mem=40Gi gang``.

A spec is whitespace-separated tokens. The first token is the *device part* when it is not a flag
and holds none of ``= < > ~``; without one the request is CPU-only. The device part follows
dstack's GPU spec: colon-separated components, each classified by its shape, in any order, each
kind at most once:

- a whole number is the count of devices per replica (default 1; a range such as ``1..2`` is
  refused, because the engine places an exact count);
- a size with a unit (``80GB``), or a range of them (``24GB..40GB``, ``48GB..``, ``..40GB``), bounds
  the card's nominal size: a single value means exactly that size, as in dstack, and every unit is
  binary (:func:`~xpupool.model.quantity.parse_card_mib`);
- ``any``, or a comma list of vendor names and aliases (``nvidia``, ``ascend,amd``), picks vendors;
- anything else is a comma list of models, any-of; ``!NAME`` excludes a model.

The tokens after it are flags (``gang``, ``span-sites``, ``nvlink``/``same-link-group``), ``key=value`` pairs
(:data:`KEYS`) and software needs (``cuda>=12.4``, ``torch=2.4``). Errors are
:class:`RequestError` whose ``field`` is the path the token maps to in the JSON form
(``request_model.py``), so both forms report the same names. :func:`format_spec` writes the
canonical text and refuses, with a :class:`RequestError`, the few requests this syntax cannot
express (a model name that looks like a count or a size, names with whitespace, ...).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from xpupool.model.errors import RequestError
from xpupool.model.qos import DEFAULT_QOS, QoS, default_priority, parse_qos
from xpupool.model.quantity import (
    format_card_mib,
    format_cpu_milli,
    format_mib_exact,
    format_permille,
    parse_card_range,
    parse_cpu_milli,
    parse_device_memory,
    parse_memory_mib,
    parse_percent_permille,
)
from xpupool.model.request import (
    MAX_DEVICES_PER_REPLICA,
    MAX_REPLICAS,
    MIG_PROFILE,
    SOFTWARE_NAMES,
    DevicePolicy,
    DeviceRequest,
    Request,
    SoftwareNeed,
    Topology,
    check_partition_name,
    parse_device_policy,
    parse_software_need,
    parse_topology,
)
from xpupool.model.speeds import Speeds, check_kind, format_speeds, parse_speeds
from xpupool.model.stopping import (
    MAX_GRACE_S,
    MAX_MIN_RUN_S,
    IdleStop,
    format_duration,
    parse_checkpoint_signal,
    parse_duration,
    parse_idle_stop,
)
from xpupool.model.taint import Toleration, format_toleration, parse_toleration
from xpupool.model.vendor import VENDOR_KEYS, VENDOR_NAMES, find_vendor, vendor_key

__all__ = ["FLAGS", "KEYS", "format_spec", "parse_spec"]

# key -> the JSON path its value fills; the path is also the error field.
KEYS: dict[str, str] = {
    "mem": "devices.memory",
    "cores": "devices.cores",
    "uuid": "devices.uuids",
    "topology": "devices.topology",
    "mig": "devices.partition",  # a MIG profile: mig=3g.40gb
    "vnpu": "devices.partition",  # an Ascend vNPU template: vnpu=vir05_1c_16g
    "cpu": "cpu",
    "memory": "memory",
    "replicas": "replicas",
    "priority": "priority",
    "queue": "queue",
    "name": "name",
    "policy": "node_policy",
    "device-policy": "device_policy",
    "site": "site",
    "prefer-site": "preferred_site",
    "data": "data",
    "sites": "span_sites",  # only 'sites=any': the flag span-sites written as a key
    "label": "node_selector",  # repeatable: every label given must be on the node
    "tolerate": "tolerations",  # repeatable: any-of, as Kubernetes' tolerations
    "kind": "kind",
    "speed": "speed",
    "grace": "grace",
    "checkpoint-signal": "checkpoint_signal",
    "min-run": "min_run",
    "idle-stop": "idle_stop",
    "qos": "qos",
}
# keys that may be given more than once (each setter refuses its own repeats)
_REPEATABLE = frozenset({"node_selector", "tolerations"})
# flag -> the JSON path it sets: 'gang' and 'span-sites' to true, the others to same-link-group.
FLAGS: dict[str, str] = {
    "gang": "gang",
    "span-sites": "span_sites",
    "nvlink": "devices.topology",
    "same-link-group": "devices.topology",
    "isolated": "devices.isolated",  # mem=20Gi isolated: the smallest partition holding it
}
_DEVICE_PATHS = (
    "devices.memory",
    "devices.cores",
    "devices.uuids",
    "devices.topology",
    "devices.partition",
    "devices.isolated",
)

_COUNT = re.compile(r"^[0-9]+$")
_SIGNED_COUNT = re.compile(r"^[+-][0-9]+$")
_INT_RANGE = re.compile(r"^[0-9]*\.\.[0-9]*$")
# A size: a number alone (refused later: it needs a unit) or a number and a unit starting with
# k/m/g/t. '910B' or '310P3' (Ascend models) stay names.
_SIZE_SHAPE = re.compile(r"^[0-9]+(?:\.[0-9]+)?(?:[kKmMgGtT][A-Za-z]*)?$")
_SOFTWARE = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*\s*(?:>=|<=|==|!=|~=|>|<)")
_NOT_IN_DEVICE_PART = frozenset("=<>~")


# ----------------------------------------------------------------------------------------- read
@dataclass(slots=True)
class _Draft:
    """What the tokens said so far; ``seen`` maps each JSON path to its text, to refuse repeats."""

    has_devices: bool = False
    count: int = 1
    vendors: tuple[str, ...] = ()
    models: tuple[str, ...] = ()
    exclude_models: tuple[str, ...] = ()
    min_card_mib: int | None = None
    max_card_mib: int | None = None
    memory_mib: int | None = None
    memory_permille: int | None = None
    core_permille: int | None = None
    uuids: tuple[str, ...] = ()
    exclude_uuids: tuple[str, ...] = ()
    topology: Topology = Topology.NONE
    partition: str | None = None
    isolated: bool = False
    software: list[SoftwareNeed] = field(default_factory=list)
    software_tokens: list[str] = field(default_factory=list)
    cpu_milli: int = 0
    host_memory_mib: int = 0
    replicas: int = 1
    max_replicas: int | None = None
    gang: bool = False
    span_sites: bool = False
    priority: int | None = None  # None: the QoS class's default (model/qos.py)
    queue: str = "default"
    name: str = ""
    node_policy: str | None = None
    device_policy: DevicePolicy | None = None
    sites: tuple[str, ...] = ()
    exclude_sites: tuple[str, ...] = ()
    node_selector: dict[str, str] = field(default_factory=dict)
    preferred_site: str | None = None
    tolerations: list[Toleration] = field(default_factory=list)
    kind: str | None = None
    speeds: Speeds = ()
    data: str | None = None
    grace_s: float | None = None
    checkpoint_signal: str | None = None
    min_run_s: float | None = None
    idle_stop: IdleStop | None = None
    qos: QoS = DEFAULT_QOS
    seen: dict[str, str] = field(default_factory=dict)

    def once(self, path: str, text: str) -> None:
        if path in self.seen:
            raise RequestError(path, text, f"given twice (first as {self.seen[path]!r})")
        self.seen[path] = text

    def build(self) -> Request:
        if not self.has_devices:
            for path in _DEVICE_PATHS:
                if path in self.seen:
                    raise RequestError(path, self.seen[path], _NEEDS_DEVICE_PART)
            if self.software:
                raise RequestError(
                    "devices.software[0]", self.software_tokens[0], _NEEDS_DEVICE_PART
                )
        devices = DeviceRequest()
        isolated_mib = None
        if self.isolated:
            if self.memory_mib is None:
                raise RequestError(
                    "devices.isolated", "isolated", "needs mem= as an amount such as 'mem=20Gi'"
                )
            isolated_mib, self.memory_mib = self.memory_mib, None
        if self.has_devices:
            devices = DeviceRequest(
                count=self.count,
                partition=self.partition,
                isolated_mib=isolated_mib,
                memory_mib=self.memory_mib,
                memory_permille=self.memory_permille,
                core_permille=self.core_permille,
                vendors=self.vendors,
                models=self.models,
                exclude_models=self.exclude_models,
                uuids=self.uuids,
                exclude_uuids=self.exclude_uuids,
                min_card_mib=self.min_card_mib,
                max_card_mib=self.max_card_mib,
                software=tuple(self.software),
                topology=self.topology,
            )
        return Request(
            name=self.name,
            cpu_milli=self.cpu_milli,
            memory_mib=self.host_memory_mib,
            devices=devices,
            replicas=self.replicas,
            gang=self.gang,
            span_sites=self.span_sites,
            priority=default_priority(self.qos, self.priority),
            queue=self.queue,
            node_policy=self.node_policy,
            device_policy=self.device_policy,
            sites=self.sites,
            exclude_sites=self.exclude_sites,
            node_selector=tuple(self.node_selector.items()),
            preferred_site=self.preferred_site,
            tolerations=tuple(self.tolerations),
            kind=self.kind,
            speeds=self.speeds,
            data=self.data,
            grace_s=self.grace_s,
            checkpoint_signal=self.checkpoint_signal,
            min_run_s=self.min_run_s,
            idle_stop=self.idle_stop,
            max_replicas=self.max_replicas,
            qos=self.qos,
        )


_NEEDS_DEVICE_PART = "applies to devices; start the spec with a device part such as 'any' or 'A100'"


def parse_spec(text: str) -> Request:
    """Parse a spec such as ``nvidia:A100,H100:2 mem=40Gi cores=50%`` into a :class:`Request`.

    An empty spec is the default (empty) request.
    """
    if not isinstance(text, str):
        raise RequestError("spec", text, "expected a string")
    tokens = text.split()
    draft = _Draft()
    if tokens and _is_device_part(tokens[0]):
        _parse_device_part(draft, tokens[0])
        tokens = tokens[1:]
    for token in tokens:
        key, sep, raw = token.partition("=")
        if sep and key.lower() in KEYS:
            path = KEYS[key.lower()]
            if not raw:
                raise RequestError(path, token, f"'{key}=' needs a value")
            if path not in _REPEATABLE:  # labels, tolerations: their setters check repeats
                draft.once(path, raw)
            _SETTERS[path](draft, path, raw)
        elif _SOFTWARE.match(token) or (sep and key.lower() in SOFTWARE_NAMES):
            path = f"devices.software[{len(draft.software)}]"
            draft.software.append(parse_software_need(token, path))
            draft.software_tokens.append(token)
        elif token.lower() in FLAGS:
            path = FLAGS[token.lower()]
            draft.once(path, token)
            if path == "gang":
                draft.gang = True
            elif path == "devices.isolated":
                draft.isolated = True
            elif path == "span_sites":
                draft.span_sites = True
            else:
                draft.topology = Topology.SAME_LINK_GROUP
        elif sep:
            raise RequestError(key, token, f"unknown key; known: {', '.join(KEYS)}")
        else:
            where = " (the device part, if any, must be the first token)"
            raise RequestError(token, token, f"unknown flag; known: {', '.join(FLAGS)}{where}")
    return draft.build()


def _is_device_part(token: str) -> bool:
    return token.lower() not in FLAGS and not _NOT_IN_DEVICE_PART.intersection(token)


def _parse_device_part(draft: _Draft, token: str) -> None:
    """``[VENDORS:][MODELS][:CARDMEM][:COUNT]``, components in any order, classified by shape."""
    draft.has_devices = True
    kinds: dict[str, str] = {}

    def once(kind: str, component: str) -> None:
        if kind == "devices.models" and kind in kinds:
            raise _second_model_list(kinds[kind], component)
        if kind in kinds:
            hint = "; give one comma list" if kind == "devices.vendors" else ""
            raise RequestError(
                kind, component, f"given twice in the device part (first as {kinds[kind]!r}){hint}"
            )
        kinds[kind] = component

    for component in token.split(":"):
        if not component:
            raise RequestError("devices", token, "empty component in the device part")
        if _INT_RANGE.match(component) and component != "..":
            raise RequestError(
                "devices.count",
                component,
                "count ranges are not supported: the engine places an exact number of devices; "
                "give one count such as '2'",
            )
        if _SIGNED_COUNT.match(component):
            raise RequestError("devices.count", component, _COUNT_RULE)
        if _COUNT.match(component):
            once("devices.count", component)
            draft.count = int(component)
            if not 1 <= draft.count <= MAX_DEVICES_PER_REPLICA:
                raise RequestError(
                    "devices.count",
                    component,
                    f"{_COUNT_RULE}; leave the device part out for a CPU-only request",
                )
        elif ".." in component or _SIZE_SHAPE.match(component):
            once("devices.card_memory", component)
            draft.min_card_mib, draft.max_card_mib = parse_card_range(
                "devices.card_memory", component
            )
        elif _is_vendor_list(component):
            once("devices.vendors", component)
            if component.lower() != "any":
                entries = component.split(",")
                draft.vendors = tuple(
                    vendor_key(v, f"devices.vendors[{i}]") for i, v in enumerate(entries)
                )
        else:
            once("devices.models", component)
            draft.models, draft.exclude_models = _split_excludes("devices.models", component)
            for i, entry in enumerate(component.split(",")):
                name = entry.removeprefix("!")
                if name.lower() == "any" or find_vendor(name) is not None:
                    raise RequestError(
                        f"devices.models[{i}]",
                        entry,
                        "a vendor is not a model; give vendors in their own component, as in "
                        "'nvidia:A100' or 'nvidia:!T4' ('any' stands alone)",
                    )


_COUNT_RULE = f"the count must be a whole number from 1 to {MAX_DEVICES_PER_REPLICA}"


def _second_model_list(first: str, second: str) -> RequestError:
    """The device part holds two components that read as model lists (``nvidai:A100``).

    Only one model list is allowed, so one of the two is a mistake: a component close to a vendor
    name is a misspelt vendor (the usual slip); otherwise say how to write one list, and when the
    second starts with a digit, that a card size needs a unit.
    """
    for component in (first, second):
        entries = component.split(",")
        for i, entry in enumerate(entries):
            close = _close_vendor(entry)
            if close is not None:
                field = "devices.vendors" if len(entries) == 1 else f"devices.vendors[{i}]"
                return RequestError(
                    field,
                    entry,
                    f"{entry!r} is not a vendor; did you mean {close!r}? "
                    f"known: {', '.join(VENDOR_KEYS)}",
                )
    hint = ""
    if second[:1].isdigit():
        hint = f"; if {second!r} is a card size, give a unit such as '80GB'"
    return RequestError(
        "devices.models",
        second,
        f"the device part has two model lists ({first!r} and {second!r}); write one comma "
        f"list such as 'A100,H100'{hint}",
    )


def _close_vendor(name: str) -> str | None:
    """The vendor name or alias ``name`` most likely misspells, or None."""
    if find_vendor(name) is not None:
        return None
    close = difflib.get_close_matches(name.lower(), VENDOR_NAMES, n=1, cutoff=0.75)
    return close[0] if close else None


def _is_vendor_list(component: str) -> bool:
    if component.lower() == "any":
        return True
    return all(find_vendor(entry) is not None for entry in component.split(","))


def _split_excludes(path: str, text: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``A100,!A100-40GB`` -> (("A100",), ("A100-40GB",)); errors name ``path[i]``."""
    include: list[str] = []
    exclude: list[str] = []
    for i, entry in enumerate(text.split(",")):
        name = entry.removeprefix("!")
        if not name or name.startswith("!"):
            raise RequestError(f"{path}[{i}]", entry, "expected a name, or '!NAME' to exclude one")
        (exclude if entry.startswith("!") else include).append(name)
    return tuple(include), tuple(exclude)


def _parse_int(path: str, raw: str, example: str) -> int:
    if not re.fullmatch(r"[+-]?[0-9]+", raw):
        raise RequestError(path, raw, f"expected a whole number of {path} such as {example}")
    return int(raw)


def _set_device_memory(d: _Draft, path: str, raw: str) -> None:
    d.memory_mib, d.memory_permille = parse_device_memory(path, raw)


def _set_cores(d: _Draft, path: str, raw: str) -> None:
    d.core_permille = parse_percent_permille(path, raw)


def _set_partition(d: _Draft, path: str, raw: str) -> None:
    d.partition = check_partition_name(path, raw)


def _set_uuids(d: _Draft, path: str, raw: str) -> None:
    d.uuids, d.exclude_uuids = _split_excludes(path, raw)


def _set_topology(d: _Draft, path: str, raw: str) -> None:
    d.topology = parse_topology(path, raw)


def _set_cpu(d: _Draft, path: str, raw: str) -> None:
    d.cpu_milli = parse_cpu_milli(path, raw)


def _set_memory(d: _Draft, path: str, raw: str) -> None:
    d.host_memory_mib = parse_memory_mib(path, raw)


def _set_replicas(d: _Draft, path: str, raw: str) -> None:
    """``replicas=4``, or an elastic range ``replicas=2..8`` (its minimum and maximum)."""
    example = f"'4' or '2..8' (1 to {MAX_REPLICAS})"
    low, sep, high = raw.partition("..")
    d.replicas = _parse_int(path, low, example)
    if sep:
        d.max_replicas = _parse_int(f"{path}.max", high, example)


def _set_priority(d: _Draft, path: str, raw: str) -> None:
    d.priority = _parse_int(path, raw, "'10' or '-5' (higher runs first)")


def _set_queue(d: _Draft, path: str, raw: str) -> None:
    d.queue = raw


def _set_name(d: _Draft, path: str, raw: str) -> None:
    d.name = raw


def _set_node_policy(d: _Draft, path: str, raw: str) -> None:
    d.node_policy = raw


def _set_device_policy(d: _Draft, path: str, raw: str) -> None:
    d.device_policy = parse_device_policy(path, raw)


def _set_sites(d: _Draft, path: str, raw: str) -> None:
    d.sites, d.exclude_sites = _split_excludes(path, raw)


def _set_preferred_site(d: _Draft, path: str, raw: str) -> None:
    d.preferred_site = raw


def _set_data(d: _Draft, path: str, raw: str) -> None:
    d.data = raw


def _set_span_sites(d: _Draft, path: str, raw: str) -> None:
    if raw != "any":
        raise RequestError(
            path, raw, "only 'sites=any' (a gang may span sites); 'site=' names sites"
        )
    d.span_sites = True


def _set_label(d: _Draft, path: str, raw: str) -> None:
    """``label=gpu-pool=a``: the first '=' after the key splits the label from its value."""
    label, sep, value = raw.partition("=")
    if not sep or not label:
        raise RequestError(path, raw, "expected label=NAME=VALUE such as 'label=gpu-pool=a'")
    at = f"{path}.{label}"
    d.once(at, value)
    d.node_selector[label] = value


def _set_toleration(d: _Draft, path: str, raw: str) -> None:
    """``tolerate=gpu``, ``tolerate=gpu=true:NoSchedule``, ``tolerate=*`` (one each, any-of)."""
    at = f"{path}[{len(d.tolerations)}]"
    toleration = parse_toleration(at, raw)
    if toleration in d.tolerations:
        raise RequestError(at, raw, "given twice")
    d.tolerations.append(toleration)


def _set_kind(d: _Draft, path: str, raw: str) -> None:
    d.kind = check_kind(path, raw)


def _set_speeds(d: _Draft, path: str, raw: str) -> None:
    d.speeds = parse_speeds(path, raw)


def _set_grace(d: _Draft, path: str, raw: str) -> None:
    d.grace_s = parse_duration(path, raw, MAX_GRACE_S)


def _set_checkpoint_signal(d: _Draft, path: str, raw: str) -> None:
    d.checkpoint_signal = parse_checkpoint_signal(path, raw)


def _set_min_run(d: _Draft, path: str, raw: str) -> None:
    d.min_run_s = parse_duration(path, raw, MAX_MIN_RUN_S)


def _set_idle_stop(d: _Draft, path: str, raw: str) -> None:
    d.idle_stop = parse_idle_stop(path, raw)


def _set_qos(d: _Draft, path: str, raw: str) -> None:
    d.qos = parse_qos(path, raw)


_SETTERS: dict[str, Callable[[_Draft, str, str], None]] = {
    "devices.memory": _set_device_memory,
    "devices.cores": _set_cores,
    "devices.uuids": _set_uuids,
    "devices.partition": _set_partition,
    "devices.topology": _set_topology,
    "cpu": _set_cpu,
    "memory": _set_memory,
    "replicas": _set_replicas,
    "priority": _set_priority,
    "queue": _set_queue,
    "name": _set_name,
    "node_policy": _set_node_policy,
    "device_policy": _set_device_policy,
    "site": _set_sites,
    "preferred_site": _set_preferred_site,
    "data": _set_data,
    "span_sites": _set_span_sites,
    "node_selector": _set_label,
    "tolerations": _set_toleration,
    "kind": _set_kind,
    "speed": _set_speeds,
    "grace": _set_grace,
    "checkpoint_signal": _set_checkpoint_signal,
    "min_run": _set_min_run,
    "idle_stop": _set_idle_stop,
    "qos": _set_qos,
}


# ---------------------------------------------------------------------------------------- write
def format_spec(req: Request) -> str:
    """The canonical spec of ``req``; ``parse_spec(format_spec(req)) == req``.

    Raises :class:`RequestError` naming the field when the syntax cannot express ``req``: names,
    queues, policies, models or UUIDs with whitespace; a model that reads as a count, a size or a
    vendor (``3090``, ``80GB``, ``npu``) or holds ``: , = < > ~ ..``; a UUID with ``,`` or a
    leading ``!``. The JSON form has none of these limits.
    """
    d = req.devices
    tokens: list[str] = []
    if d.count:
        tokens.append(_format_device_part(d))
    if d.memory_mib is not None:
        tokens.append(f"mem={format_mib_exact(d.memory_mib)}")
    if d.memory_permille is not None:
        tokens.append(f"mem={format_permille(d.memory_permille)}")
    if d.core_permille is not None:
        tokens.append(f"cores={format_permille(d.core_permille)}")
    if d.partition is not None:
        key = "mig" if MIG_PROFILE.match(d.partition) else "vnpu"
        tokens.append(f"{key}={d.partition}")
    if d.isolated_mib is not None:
        tokens.append(f"mem={format_mib_exact(d.isolated_mib)} isolated")
    if d.uuids or d.exclude_uuids:
        for path, uuid in _indexed("devices", "uuids", d.uuids, d.exclude_uuids):
            _check_token(path, uuid)
            if "," in uuid or uuid.startswith("!"):
                raise _inexpressible(path, uuid, "holds ',' or starts with '!'")
        entries = [*d.uuids, *(f"!{u}" for u in d.exclude_uuids)]
        tokens.append(f"uuid={','.join(entries)}")
    if d.topology is Topology.SAME_LINK_GROUP:
        tokens.append("same-link-group")
    elif d.topology is not Topology.NONE:
        tokens.append(f"topology={d.topology.value}")
    for i, need in enumerate(d.software):
        tokens.append(_check_token(f"devices.software[{i}]", str(need)))
    if req.cpu_milli:
        tokens.append(f"cpu={format_cpu_milli(req.cpu_milli)}")
    if req.memory_mib:
        tokens.append(f"memory={format_mib_exact(req.memory_mib)}")
    if req.max_replicas is not None:
        tokens.append(f"replicas={req.replicas}..{req.max_replicas}")
    elif req.replicas != 1:
        tokens.append(f"replicas={req.replicas}")
    if req.gang:
        tokens.append("gang")
    if req.span_sites:
        tokens.append("span-sites")
    if req.priority != default_priority(req.qos, None):
        tokens.append(f"priority={req.priority}")
    if req.queue != "default":
        tokens.append(f"queue={_check_token('queue', req.queue)}")
    if req.name:
        tokens.append(f"name={_check_token('name', req.name)}")
    if req.node_policy is not None:
        tokens.append(f"policy={_check_token('node_policy', req.node_policy)}")
    if req.device_policy is not None:
        tokens.append(f"device-policy={req.device_policy.value}")
    if req.sites or req.exclude_sites:
        for path, site in _indexed("", "sites", req.sites, req.exclude_sites):
            _check_token(path.lstrip("."), site)
        tokens.append(f"site={','.join([*req.sites, *(f'!{x}' for x in req.exclude_sites)])}")
    if req.preferred_site is not None:
        tokens.append(f"prefer-site={_check_token('preferred_site', req.preferred_site)}")
    if req.data is not None:
        tokens.append(f"data={_check_token('data', req.data)}")
    for label, value in req.node_selector:
        tokens.append(f"label={label}={_check_token(f'node_selector.{label}', value)}")
    for toleration in req.tolerations:
        tokens.append(f"tolerate={format_toleration(toleration)}")
    if req.kind is not None:
        tokens.append(f"kind={_check_token('kind', req.kind)}")
    if req.speeds:
        tokens.append(f"speed={format_speeds(req.speeds)}")
    if req.grace_s is not None:
        tokens.append(f"grace={format_duration(req.grace_s)}")
    if req.checkpoint_signal is not None:
        tokens.append(f"checkpoint-signal={req.checkpoint_signal}")
    if req.min_run_s is not None:
        tokens.append(f"min-run={format_duration(req.min_run_s)}")
    if req.idle_stop is not None:
        tokens.append(f"idle-stop={req.idle_stop.text()}")
    if req.qos is not DEFAULT_QOS:
        tokens.append(f"qos={req.qos.value}")
    return " ".join(tokens)


def _format_device_part(d: DeviceRequest) -> str:
    components: list[str] = []
    if d.vendors:
        components.append(",".join(d.vendors))
    names = [*d.models, *(f"!{m}" for m in d.exclude_models)]
    for path, model in _indexed("devices", "models", d.models, d.exclude_models):
        _check_model(path, model)
    if names:
        components.append(",".join(names))
    low, high = d.min_card_mib, d.max_card_mib
    if low is not None and low == high:
        components.append(format_card_mib(low))
    elif low is not None or high is not None:
        low_text = "" if low is None else format_card_mib(low)
        high_text = "" if high is None else format_card_mib(high)
        components.append(f"{low_text}..{high_text}")
    if d.count != 1:
        components.append(str(d.count))
    part = ":".join(components) if components else "any"
    if part.lower() in FLAGS:  # a model named like a flag: an explicit count keeps it a device part
        part += ":1"
    return part


def _indexed(
    prefix: str, key: str, include: tuple[str, ...], exclude: tuple[str, ...]
) -> list[tuple[str, str]]:
    """(JSON path, value) pairs: ``devices.models[0]``, ..., ``devices.exclude_models[0]``, ..."""
    return [(f"{prefix}.{key}[{i}]", v) for i, v in enumerate(include)] + [
        (f"{prefix}.exclude_{key}[{i}]", v) for i, v in enumerate(exclude)
    ]


def _check_model(path: str, model: str) -> None:
    _check_token(path, model)
    if (
        any(c in model for c in ":,=<>~")
        or ".." in model
        or model.startswith("!")
        or _COUNT.match(model)
        or _SIZE_SHAPE.match(model)
        or model.lower() == "any"
        or find_vendor(model) is not None
    ):
        raise _inexpressible(
            path, model, "reads as a count, a size or a vendor, or holds one of : , = < > ~ .. !"
        )


def _check_token(path: str, value: str) -> str:
    if not value or any(c.isspace() for c in value):
        raise _inexpressible(path, value, "is empty or holds whitespace")
    return value


def _inexpressible(path: str, value: str, why: str) -> RequestError:
    return RequestError(path, value, f"{why}, which the spec syntax cannot express; use JSON")
