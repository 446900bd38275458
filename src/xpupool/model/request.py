"""What a user asks for: one replica's CPU, memory and devices, times ``replicas``.

The device part says how many cards, how much of each (an amount of memory, a share of memory, a
share of compute, or the whole card), which cards are acceptable (vendor/model any-of, excludes,
UUIDs, card size), what software must run there, and whether the cards must share a fast link.
Everything is validated on construction; errors name the field. Users write requests as the JSON
object or the compact string, both read by ``request_model.py``, which converts them to these
records in one place.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from enum import StrEnum
from operator import attrgetter

from xpupool.model.errors import RequestError
from xpupool.model.qos import DEFAULT_QOS, QoS, parse_qos
from xpupool.model.speeds import Speeds, check_kind, check_speeds
from xpupool.model.stopping import (
    MAX_GRACE_S,
    MAX_MIN_RUN_S,
    IdleStop,
    parse_checkpoint_signal,
    parse_duration,
    parse_idle_stop,
)
from xpupool.model.taint import Toleration, check_tolerations
from xpupool.model.vendor import vendor_key
from xpupool.model.version import OPERATORS, Version, parse_version

WHOLE = 1000  # one device in thousandths
MAX_DEVICES_PER_REPLICA = 64
MAX_REPLICAS = 10_000

SOFTWARE_NAMES: dict[str, str] = {
    "cuda": "cuda",
    "cann": "cann",
    "rocm": "rocm",
    "torch": "torch",
    "pytorch": "torch",
}
# The version must start with a digit and hold only version characters, so that typos such as
# 'cuda>==12.4' or 'cuda>=12.4,' are refused instead of being read as odd version strings.
_NEED = re.compile(
    r"^\s*([A-Za-z][A-Za-z0-9_-]*)\s*(>=|<=|==|!=|~=|>|<|=)\s*([0-9][0-9A-Za-z._-]*)\s*$"
)


class Topology(StrEnum):
    """Placement constraint among one replica's devices."""

    NONE = "none"
    SAME_LINK_GROUP = "same-link-group"  # all devices in one NVLink/HCCS/xGMI domain
    SAME_NUMA = "same-numa"  # all devices on one NUMA node of the host (HAMi's numa-bind)


class DevicePolicy(StrEnum):
    """How devices are chosen inside the chosen node."""

    BINPACK = "binpack"  # fill the busiest card that fits: keeps whole cards free
    SPREAD = "spread"  # take the emptiest card: less interference between sharers


# 'nvlink' is accepted on read as the familiar name of the same constraint.
TOPOLOGY_ALIASES: dict[str, Topology] = {
    **{t.value: t for t in Topology},
    "nvlink": Topology.SAME_LINK_GROUP,
}


def parse_topology(path: str, value: object) -> Topology:
    """``"same-link-group"`` (or its alias ``"nvlink"``), ``"same-numa"`` or ``"none"``,
    case-insensitively."""
    topology = TOPOLOGY_ALIASES.get(_text(path, value).lower())
    if topology is None:
        raise RequestError(path, value, f"unknown topology; known: {', '.join(TOPOLOGY_ALIASES)}")
    return topology


def parse_device_policy(path: str, value: object) -> DevicePolicy:
    """``"binpack"`` or ``"spread"``."""
    try:
        return DevicePolicy(_text(path, value))
    except ValueError:
        known = ", ".join(p.value for p in DevicePolicy)
        raise RequestError(path, value, f"unknown device policy; known: {known}") from None


def _text(path: str, value: object) -> str:
    if not isinstance(value, str):
        raise RequestError(path, value, "expected a string")
    return value


@dataclass(frozen=True, slots=True)
class SoftwareNeed:
    """``cuda>=12.1``: a runtime name from :data:`SOFTWARE_NAMES`, an operator and a version."""

    name: str
    op: str
    version: Version

    def __str__(self) -> str:
        return f"{self.name}{self.op}{self.version}"


def parse_software_need(text: str, field: str = "software") -> SoftwareNeed:
    """Parse ``cuda>=12.1``, ``cann>=8.0.RC1``, ``torch==2.4``; ``=`` is read as ``==``."""
    if not isinstance(text, str):
        raise RequestError(field, text, "expected a string such as 'cuda>=12.1'")
    match = _NEED.match(text)
    if match is None:
        raise RequestError(field, text, "expected NAME OP VERSION such as 'cuda>=12.1'")
    name, op, version = match.groups()
    canonical = SOFTWARE_NAMES.get(name.lower())
    if canonical is None:
        raise RequestError(
            field, text, f"unknown software {name!r}; known: cuda, cann, rocm, torch"
        )
    op = "==" if op == "=" else op
    assert op in OPERATORS
    return SoftwareNeed(canonical, op, parse_version(version, field))


# The tuple-valued fields, which a caller may give as any sequence.
_LIST_FIELDS = (
    "vendors",
    "models",
    "exclude_models",
    "uuids",
    "exclude_uuids",
    "software",
    "type_contains",
    "exclude_type_contains",
    "share_modes",
)


@dataclass(frozen=True, slots=True)
class DeviceRequest:
    """Devices for one replica. ``count == 0`` means a CPU-only replica.

    Amount per device, in order of precedence:
    - nothing given: the whole card, exclusively;
    - ``memory_mib`` or ``memory_permille`` (thousandths of the card): that much memory, and
      ``core_permille`` of compute (0 when not given: compute is shared best-effort, as HAMi does);
    - only ``core_permille``: that share of compute and the same share of memory (a slice).
    Selectors: ``vendors`` and ``models`` are any-of lists (empty = any); ``exclude_models`` and
    ``exclude_uuids`` win over includes; ``min_card_mib``/``max_card_mib`` bound the card's
    nominal size. ``type_contains`` (any-of) and ``exclude_type_contains`` match case-insensitive
    substrings of the type string the card was registered under (``Device.type_name``), not the
    catalog: they carry HAMi's ``use-gputype``/``nouse-gputype`` exactly as HAMi tests them
    (``CheckType``), so ``A10`` takes an A100 there and ``Tesla`` only a T4.
    ``share_modes`` (any-of; empty = any) are the ways of sharing a card the replica accepts, as
    the card's node registered it (``Device.share_mode``: ``hami-core``, ``mps``, ``mig``); a
    card whose node states no mode passes. It carries HAMi's ``nvidia.com/vgpu-mode``.
    ``topology`` ``same-numa`` puts all devices of the replica on one NUMA node of the host.
    Hardware partitions (``Device.partition``): ``partition`` names the profile each device must
    be (``3g.40gb``, ``vir05_1c_16g``); ``isolated_mib`` asks for a partition holding that much
    memory, the smallest profile of the card's model that does (``mem=20Gi isolated``). Either
    takes each partition whole and alone, and only partitions; without them a request never
    lands on one. Both are shapes of a whole-device request, so no share is given beside them.
    """

    count: int = 0
    memory_mib: int | None = None
    memory_permille: int | None = None
    core_permille: int | None = None
    vendors: tuple[str, ...] = ()
    models: tuple[str, ...] = ()
    exclude_models: tuple[str, ...] = ()
    uuids: tuple[str, ...] = ()
    exclude_uuids: tuple[str, ...] = ()
    min_card_mib: int | None = None
    max_card_mib: int | None = None
    software: tuple[SoftwareNeed, ...] = ()
    topology: Topology = Topology.NONE
    type_contains: tuple[str, ...] = ()
    exclude_type_contains: tuple[str, ...] = ()
    share_modes: tuple[str, ...] = ()
    partition: str | None = None
    isolated_mib: int | None = None
    # Every field above, in order, made once: the engine's caches key on a device request per
    # request, and hashing or comparing this tuple costs a fraction of building it each time.
    _key: tuple[object, ...] = field(init=False, repr=False, compare=False)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DeviceRequest):
            return NotImplemented
        return self is other or self._key == other._key

    def __hash__(self) -> int:
        return hash(self._key)

    def __post_init__(self) -> None:
        _check_int("devices.count", self.count, 0, MAX_DEVICES_PER_REPLICA)
        if self.memory_mib is not None and self.memory_permille is not None:
            raise RequestError(
                "devices.memory",
                self.memory_mib,
                "give memory as an amount or a percentage, not both",
            )
        if self.memory_mib is not None:
            _check_int("devices.memory", self.memory_mib, 1, 1 << 40)
        if self.memory_permille is not None:
            _check_int("devices.memory", self.memory_permille, 1, WHOLE)
        if self.core_permille is not None:
            # 0 would be a zero-sized slice on its own and the same as None next to memory.
            _check_int("devices.cores", self.core_permille, 1, WHOLE)
        _check_partition(self)
        if self.count == 0 and self.shares_specified:
            raise RequestError(
                "devices.count", 0, "memory or cores per device need a count of at least 1"
            )
        if self.min_card_mib is not None:
            _check_int("devices.card_memory.min", self.min_card_mib, 1, 1 << 40)
        if self.max_card_mib is not None:
            _check_int("devices.card_memory.max", self.max_card_mib, 1, 1 << 40)
        if (
            self.min_card_mib is not None
            and self.max_card_mib is not None
            and self.min_card_mib > self.max_card_mib
        ):
            raise RequestError(
                "devices.card_memory.max",
                self.max_card_mib,
                f"smaller than devices.card_memory.min ({self.min_card_mib} MiB)",
            )
        try:
            object.__setattr__(self, "topology", Topology(self.topology))
        except ValueError:
            known = ", ".join(t.value for t in Topology)
            raise RequestError("devices.topology", self.topology, f"known: {known}") from None
        for name in _LIST_FIELDS:
            object.__setattr__(self, name, tuple(getattr(self, name)))
        # Canonical vendor keys, as Device keeps them: 'cuda' would otherwise match no device.
        vendors = tuple(vendor_key(v, f"devices.vendors[{i}]") for i, v in enumerate(self.vendors))
        object.__setattr__(self, "vendors", vendors)
        if self.count == 0:
            selectors = {
                "vendors": self.vendors,
                "models": self.models,
                "exclude_models": self.exclude_models,
                "uuids": self.uuids,
                "exclude_uuids": self.exclude_uuids,
                "type_contains": self.type_contains,
                "exclude_type_contains": self.exclude_type_contains,
                "share_modes": self.share_modes,
                "card_memory": self.min_card_mib is not None or self.max_card_mib is not None,
                "software": self.software,
                "topology": self.topology is not Topology.NONE,
                "partition": self.partition is not None,
                "isolated": self.isolated_mib is not None,
            }
            for name, given in selectors.items():
                if given:
                    raise RequestError(
                        "devices.count", 0, f"devices.{name} needs a count of at least 1"
                    )
        object.__setattr__(self, "_key", tuple(getattr(self, name) for name in _DEVICE_FIELDS))

    @property
    def shares_specified(self) -> bool:
        return not (
            self.memory_mib is None and self.memory_permille is None and self.core_permille is None
        )

    @property
    def whole(self) -> bool:
        """True when each device is taken whole and exclusively."""
        return self.count > 0 and not self.shares_specified

    @property
    def need_memory_permille(self) -> int | None:
        """Memory per device as a share of the card, or None when given in MiB."""
        if self.memory_mib is not None:
            return None
        if self.memory_permille is not None:
            return self.memory_permille
        if self.core_permille is not None:
            return self.core_permille
        return WHOLE

    @property
    def need_core_permille(self) -> int:
        """Compute per device in thousandths of the card."""
        if self.core_permille is not None:
            return self.core_permille
        return 0 if self.shares_specified else WHOLE

    def selector_key(self) -> tuple[object, ...]:
        """Everything that decides which cards are acceptable, independent of free capacity.

        The engine caches the eligible-device mask under this key.
        """
        return (
            self.vendors,
            self.models,
            self.exclude_models,
            self.uuids,
            self.exclude_uuids,
            self.min_card_mib,
            self.max_card_mib,
            self.software,
            self.type_contains,
            self.exclude_type_contains,
            self.share_modes,
            self.partition,
            self.isolated_mib,
        )


# A partition profile's name as the vendor tools print it: MIG (``1g.10gb``, ``1g.10gb+me``,
# ``3g.40gb``) or an Ascend vNPU template (``vir02``, ``vir05_1c_16g``).
MIG_PROFILE = re.compile(r"^[1-9][0-9]?g\.[0-9]+gb(\+me)?$")
VNPU_TEMPLATE = re.compile(r"^vir[0-9]{2}(_[0-9]+c_[0-9]+g)?$")


def check_partition_name(path: str, value: object, kind: str | None = None) -> str:
    """``value`` as a profile name of ``kind`` (``mig``, ``vnpu``; None: either), else a
    RequestError on ``path`` that shows the shapes."""
    text = _text(path, value)
    shapes = {"mig": MIG_PROFILE, "vnpu": VNPU_TEMPLATE}
    kinds = (kind,) if kind is not None else tuple(shapes)
    if not any(shapes[k].match(text) for k in kinds):
        examples = {"mig": "'3g.40gb' or '1g.10gb+me'", "vnpu": "'vir05_1c_16g' or 'vir02'"}
        said = " or ".join(examples[k] for k in kinds)
        raise RequestError(path, value, f"expected a partition profile such as {said}")
    return text


def _check_partition(d: DeviceRequest) -> None:
    """A partition request takes whole partitions: no share, one way of naming the profile."""
    if d.partition is not None:
        check_partition_name("devices.partition", d.partition)
        if d.isolated_mib is not None:
            raise RequestError(
                "devices.isolated", True, "give a profile or isolated memory, not both"
            )
    if d.isolated_mib is not None:
        _check_int("devices.memory", d.isolated_mib, 1, 1 << 40)
    if (d.partition is not None or d.isolated_mib is not None) and d.shares_specified:
        field = "devices.partition" if d.partition is not None else "devices.isolated"
        raise RequestError(
            field,
            d.partition or True,
            "a partition is taken whole; give no memory or cores share beside it",
        )


_DEVICE_FIELDS = tuple(f.name for f in fields(DeviceRequest) if f.name != "_key")


@dataclass(frozen=True, slots=True)
class Request:
    """One job's placement request: ``replicas`` copies of (cpu, memory, devices).

    ``gang`` makes the replicas all-or-nothing. ``node_policy``/``device_policy`` override the
    cluster's profile for this request (None = the cluster default). Where the replicas may run:
    ``sites`` is an any-of list of node sites (empty = any), ``exclude_sites`` wins over it,
    ``node_selector`` holds (label, value) pairs sorted by label that a node must all carry, and
    ``preferred_site`` is a preference, not a constraint: its nodes score higher, others still
    fit. ``span_sites`` lets a gang's replicas span sites; without it a gang is placed within one
    site (replicas that are not a gang go wherever each fits). ``tolerations`` (any-of, in one
    canonical order) let the replicas onto nodes whose taints they tolerate (``model/taint.py``).
    ``kind`` names the job type and ``speeds`` its relative speed per card model
    (``model/speeds.py``), as the job declares them; the throughput scorer reads them.
    ``data`` names a dataset of the sites file the job reads, so that a site is chosen knowing
    where it lives (``engine/site_choice.py``); None: no dataset. ``container`` True: the job
    runs a container image, so only nodes with a container runtime may take it; it is not part of
    the JSON or compact forms (the server sets it from the job's ``image``). ``grace_s``,
    ``checkpoint_signal`` and ``min_run_s`` say how the job is stopped well
    (``model/stopping.py``); they do not change where it fits. ``max_replicas`` makes the job
    elastic (``replicas=2..8``): ``replicas`` is then its minimum, admitted and placed all or none
    as a gang is, and the scheduling cycle grows it into idle capacity up to ``max_replicas`` one
    replica at a time and shrinks it back first when others need room
    (``engine/cycle/elastic.py``); None: a fixed size. A range of one size (``2..2``) is that
    fixed size. ``qos`` is the job's class (``model/qos.py``): a guaranteed share is placed only
    within a card's physical capacity, never on its over-committed part.
    """

    name: str = ""
    cpu_milli: int = 0
    memory_mib: int = 0
    devices: DeviceRequest = field(default_factory=DeviceRequest)
    replicas: int = 1
    gang: bool = False
    priority: int = 0
    queue: str = "default"
    node_policy: str | None = None
    device_policy: DevicePolicy | None = None
    sites: tuple[str, ...] = ()
    exclude_sites: tuple[str, ...] = ()
    node_selector: tuple[tuple[str, str], ...] = ()
    preferred_site: str | None = None
    tolerations: tuple[Toleration, ...] = ()
    container: bool = False
    span_sites: bool = False
    kind: str | None = None
    speeds: Speeds = ()
    data: str | None = None
    grace_s: float | None = None  # SIGTERM to SIGKILL when stopped; None: the server's default
    checkpoint_signal: str | None = None  # sent before SIGTERM (model/stopping.py); None: none
    min_run_s: float | None = None  # not preempted before it ran this long; None: any time
    idle_stop: IdleStop | None = None  # stopped once its cards stayed idle so long; None: never
    max_replicas: int | None = None  # elastic: grows up to this from ``replicas``; None: fixed
    qos: QoS = DEFAULT_QOS  # guaranteed, burstable or best-effort (model/qos.py)
    # the link domains (``site/value``, engine/link_domains.py) a gang's replicas are kept to,
    # set by the engine as it places them; in neither the JSON nor the compact form; empty: any
    link_domains: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _check_int("cpu", self.cpu_milli, 0, 1 << 40)
        _check_int("memory", self.memory_mib, 0, 1 << 50)
        _check_int("replicas", self.replicas, 1, MAX_REPLICAS)
        if self.max_replicas is not None:
            check_replica_range(self.replicas, self.max_replicas)
            if self.max_replicas == self.replicas:  # ``2..2`` is a fixed size: one form of it
                object.__setattr__(self, "max_replicas", None)
        _check_int("priority", self.priority, -(1 << 31), (1 << 31) - 1)
        if not self.queue:
            raise RequestError("queue", self.queue, "must not be empty")
        if self.node_policy is not None and not self.node_policy:
            raise RequestError("node_policy", self.node_policy, "must not be empty; use None")
        if self.device_policy is not None:
            try:
                object.__setattr__(self, "device_policy", DevicePolicy(self.device_policy))
            except ValueError:
                raise RequestError(
                    "device_policy", self.device_policy, "must be 'binpack' or 'spread'"
                ) from None
        object.__setattr__(self, "link_domains", tuple(self.link_domains))
        for key in ("sites", "exclude_sites"):
            names = tuple(getattr(self, key))
            object.__setattr__(self, key, names)
            for i, name in enumerate(names):
                check_site_name(f"site[{i}]", name)  # the JSON form holds both in 'site'
        if self.preferred_site is not None:
            check_site_name("preferred_site", self.preferred_site)
        if self.data is not None:
            check_dataset_name("data", self.data)
        pairs = self.node_selector
        items = pairs.items() if isinstance(pairs, Mapping) else pairs
        selector = tuple(sorted((k, v) for k, v in items))
        for i, (label, value) in enumerate(selector):
            check_label(f"node_selector.{label}", label, value)
            if i and selector[i - 1][0] == label:
                raise RequestError(f"node_selector.{label}", value, "label given twice")
        object.__setattr__(self, "node_selector", selector)
        object.__setattr__(self, "tolerations", check_tolerations("tolerations", self.tolerations))
        if self.kind is not None:
            check_kind("kind", self.kind)
        object.__setattr__(self, "speeds", check_speeds("speed", tuple(self.speeds)))
        if self.grace_s is not None:
            parse_duration("grace", self.grace_s, MAX_GRACE_S)
        if self.min_run_s is not None:
            parse_duration("min_run", self.min_run_s, MAX_MIN_RUN_S)
        if self.idle_stop is not None:
            object.__setattr__(self, "idle_stop", parse_idle_stop("idle_stop", self.idle_stop))
        if self.checkpoint_signal is not None:
            signal = parse_checkpoint_signal("checkpoint_signal", self.checkpoint_signal)
            object.__setattr__(self, "checkpoint_signal", signal)
        object.__setattr__(self, "qos", parse_qos("qos", self.qos))


def fields_but(*left_out: str) -> Callable[[Request], tuple[object, ...]]:
    """A key of a request: the tuple of its fields but ``left_out``, equal for requests that differ
    only there. Cheaper than the request built again without them, which validates it again."""
    assert set(left_out) <= {f.name for f in fields(Request)}, left_out
    return attrgetter(*(f.name for f in fields(Request) if f.name not in left_out))


def check_replica_range(low: int, high: object) -> None:
    """An elastic job's bounds: ``high`` (``replicas.max``) a whole number from ``low`` (the
    minimum, checked already) to :data:`MAX_REPLICAS`."""
    _check_int("replicas.max", high, 1, MAX_REPLICAS)
    assert isinstance(high, int)
    if high < low:
        raise RequestError("replicas.max", high, f"must be at least the minimum ({low})")


def check_site_name(path: str, name: object) -> str:
    """A site as nodes register it: non-empty text without whitespace, ',' or a leading '!'."""
    if not isinstance(name, str):
        raise RequestError(path, name, "expected a site name")
    if not name or any(c.isspace() or c == "," for c in name) or name.startswith("!"):
        raise RequestError(
            path, name, "a site name is non-empty, without whitespace, ',' or a leading '!'"
        )
    return name


def check_dataset_name(path: str, name: object) -> str:
    """A dataset's name, as the sites file and ``data=`` write it: one word, as a site's."""
    try:
        return check_site_name(path, name)
    except RequestError as exc:
        raise RequestError(path, name, exc.reason.replace("site", "dataset")) from None


def check_label(path: str, label: object, value: object) -> None:
    """A node label and its value as a request selects them: text without whitespace, the label
    non-empty and without '=' (``label=gpu-pool=a`` splits at the first '=')."""
    if not isinstance(label, str) or not label or "=" in label or _has_space(label):
        raise RequestError(path, label, "a label is non-empty, without whitespace or '='")
    if not isinstance(value, str) or not value or _has_space(value):
        raise RequestError(path, value, "a label value is non-empty text without whitespace")


def _has_space(text: str) -> bool:
    return any(c.isspace() for c in text)


def _check_int(field_name: str, value: object, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestError(field_name, value, "expected a whole number")
    if not low <= value <= high:
        raise RequestError(field_name, value, f"must be between {low} and {high}")
