"""A Pod as users write it for HAMi, read into xpupool's engine requests: one per device container.

HAMi reads a pod per container, init containers first, then containers (pkg/device/devices.go
``Resourcereqs``, HAMi v2.10.0, commit 4707fb02c91c), and the same order numbers the entries of its
device annotations, so :class:`PodDemand` keeps it. Each container's device resources are read through
the one table of ``resource_names.py`` with HAMi's rules: ``limits`` first, else ``requests``
(``GenerateResourceRequests`` of every vendor; ``limits`` only where HAMi reads only them); no
memory given means the whole card's memory (nvidia ``mempnum = 100`` when ``defaultMemory`` is 0);
no cores given means the vendor's default, and an NVIDIA container with whole-card memory and no
cores gets the whole card (the admission webhook's ``defaultExclusiveCoreIfNeeded``). Pod
annotations add HAMi's type/UUID include and exclude lists and policies and xpupool's own
(``xpupool.io/request`` read by :class:`~xpupool.model.request_model.RequestModel`, the one parser of
the compact syntax). Where HAMi silently clamps or ignores a bad value, a pod here is refused with a
:class:`PodRequestError` naming the field path, e.g.
``spec.containers[1].resources.limits["nvidia.com/gpumem"]``, so the extender can report it.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import TypeVar

from pydantic import ValidationError

from xpupool.k8s.codec.hami import go_bool
from xpupool.k8s.codec.hami_partitions import mig_resource_profile
from xpupool.k8s.codec.pod_charge import Role, container_role
from xpupool.k8s.codec.quantity import parse_quantity
from xpupool.k8s.codec.resource_names import RESOURCES, Counts, DeviceKind
from xpupool.model.errors import RequestError
from xpupool.model.request import (
    WHOLE,
    DevicePolicy,
    DeviceRequest,
    Request,
    Topology,
    check_partition_name,
)
from xpupool.model.request_model import RequestModel
from xpupool.model.validation import request_error

__all__ = [
    "ANNOTATION_PRIORITY",
    "ANNOTATION_PROFILE",
    "ANNOTATION_QOS",
    "ANNOTATION_QUEUE",
    "ANNOTATION_REQUEST",
    "ANNOTATION_SITE",
    "ANNOTATION_SOFTWARE",
    "GPU_POLICY_ANNOTATION",
    "NODE_POLICY_ANNOTATION",
    "ContainerDemand",
    "PodDemand",
    "PodRequestError",
    "names_managed_resource",
    "pod_cpu_memory",
    "pod_demand",
]

# pkg/util/types.go: NodeSchedulerPolicyAnnotationKey, GPUSchedulerPolicyAnnotationKey.
NODE_POLICY_ANNOTATION = "hami.io/node-scheduler-policy"
GPU_POLICY_ANNOTATION = "hami.io/gpu-scheduler-policy"
ANNOTATION_REQUEST = "xpupool.io/request"
ANNOTATION_SOFTWARE = "xpupool.io/software"
ANNOTATION_SITE = "xpupool.io/site"
ANNOTATION_PROFILE = "xpupool.io/profile"
ANNOTATION_QUEUE = "xpupool.io/queue"
ANNOTATION_PRIORITY = "xpupool.io/priority"
ANNOTATION_QOS = "xpupool.io/qos"  # guaranteed, burstable, best-effort (model/qos.py)
# HAMi's GPU policies (types.go). Only binpack and spread exist in xpupool's engine; a pod that
# asks for another is refused rather than placed under a policy it did not ask for.
_HAMI_GPU_POLICIES = ("binpack", "spread", "topology-aware", "mutex", "numa")
# HAMi's card sharing modes (pkg/device/nvidia/device.go HamiCoreMode, MpsMode, MigMode), and those
# xpupool places shares on; a pod that names only ``mig`` asks for MIG instances instead.
_HAMI_MODES = ("hami-core", "mps", "mig")
_PLACED_MODES = ("hami-core", "mps")
_MIG_MODE = "mig"
# Hostile-input bounds. Kubernetes caps all annotations of an object at 256 KiB
# (apimachinery TotalAnnotationSizeLimitB); containers are capped here, not by Kubernetes.
MAX_ANNOTATION_BYTES = 256 * 1024
MAX_CONTAINERS = 256
MAX_LIST_ITEMS = 256
MAX_ITEM_CHARS = 256
_INT32 = (1 << 31) - 1


class PodRequestError(RequestError):
    """A pod whose device request is invalid: ``field`` is the path in the Pod object."""


@dataclass(frozen=True, slots=True)
class ContainerDemand:
    """One container that asks for managed devices. ``index`` is its position in HAMi's order
    (init containers first), the entry it owns in HAMi's device annotations; ``role`` how long
    it runs (an init container, a sidecar, an app container: ``pod_charge.py``, which decides
    what the pod is charged); ``kind`` is the HAMi device type it asks for; ``task_priority`` is
    HAMi-core's ``nvidia.com/priority`` (None: not given), which the device plugin passes to the
    limiter and the scheduler does not use."""

    index: int
    name: str
    role: Role
    kind: DeviceKind
    request: Request
    task_priority: int | None = None

    @property
    def init(self) -> bool:
        """Is it one of ``spec.initContainers`` (a sidecar included)?"""
        return self.role is not Role.APP


@dataclass(frozen=True, slots=True)
class PodDemand:
    """What a pod asks of xpupool. ``containers`` names every container in HAMi's order (init
    containers first); ``demands`` holds those that ask for a managed device, in that order."""

    namespace: str
    name: str
    uid: str
    containers: tuple[str, ...]
    demands: tuple[ContainerDemand, ...]

    @property
    def managed(self) -> bool:
        """Does the pod ask for any device xpupool manages?"""
        return bool(self.demands)


def pod_demand(pod: object) -> PodDemand:
    """Read a Pod object (the JSON kube-scheduler sends) into a :class:`PodDemand`.

    Raises :class:`PodRequestError` naming the field for malformed objects, invalid quantities,
    memory or cores without a count, a container asking for two device types, percentages over
    100, conflicting annotations and unknown policies. Deterministic; no I/O (HAMi's type names
    are matched later, against the cards' registered type strings, not through the catalog).
    """
    obj = _object("", pod)
    metadata = _object("metadata", obj.get("metadata", {}))
    spec = _object("spec", obj.get("spec"))
    annotations = _annotations(metadata.get("annotations"))
    pod_base = _pod_base(annotations)
    names: list[str] = []
    demands: list[ContainerDemand] = []
    for key, init in (("initContainers", True), ("containers", False)):
        for i, container in enumerate(_list(f"spec.{key}", spec.get(key))):
            path = f"spec.{key}[{i}]"
            ctr = _object(path, container)
            name = ctr.get("name", "")
            if not isinstance(name, str) or len(name) > 253:
                raise PodRequestError(f"{path}.name", _short(name), "expected a container name")
            names.append(name)
            if len(names) > MAX_CONTAINERS:
                raise PodRequestError(f"spec.{key}", len(names), f"more than {MAX_CONTAINERS}")
            role = container_role(ctr, init)
            demand = _container(path, ctr, len(names) - 1, role, annotations, pod_base)
            if demand is not None:
                demands.append(demand)
    if not names:
        raise PodRequestError("spec.containers", [], "a pod has at least one container")
    if not demands and pod_base.devices is not None and pod_base.devices.count:
        # The device plugin hands devices only to containers that ask for its resource.
        reason = "asks for devices, but no container has a device resource (e.g. nvidia.com/gpu)"
        # the devices came from the request annotation, or from the software one alone
        key = ANNOTATION_REQUEST if ANNOTATION_REQUEST in annotations else ANNOTATION_SOFTWARE
        raise PodRequestError(_at(key), annotations.get(key), reason)
    return PodDemand(
        namespace=_text("metadata.namespace", metadata.get("namespace", "")),
        name=_text("metadata.name", metadata.get("name", "")),
        uid=_text("metadata.uid", metadata.get("uid", "")),
        containers=tuple(names),
        demands=tuple(demands),
    )


def names_managed_resource(pod: object) -> bool:
    """Whether a container or init container of the pod names a resource of
    :data:`RESOURCES` or a MIG profile's (``nvidia.com/mig-<profile>``) in its requests or
    limits, whatever the amount: kube-scheduler's test for handing a pod to an extender whose
    ``managedResources`` are those names
    (``HTTPExtender.IsInterested``, pkg/scheduler/extender.go), so the pods it would send. False
    for anything that is not a pod's shape."""
    spec = pod.get("spec") if isinstance(pod, Mapping) else None
    if not isinstance(spec, Mapping):
        return False
    for key in ("initContainers", "containers"):
        containers = spec.get(key)
        for ctr in containers if isinstance(containers, list) else ():
            resources = ctr.get("resources") if isinstance(ctr, Mapping) else None
            if not isinstance(resources, Mapping):
                continue
            for table in (resources.get("limits"), resources.get("requests")):
                if isinstance(table, Mapping) and any(_managed(name) for name in table):
                    return True
    return False


def _managed(name: object) -> bool:
    """A name of :data:`RESOURCES`, or a MIG profile's (``nvidia.com/mig-3g.20gb``)."""
    return isinstance(name, str) and (name in RESOURCES or mig_resource_profile(name) is not None)


def pod_cpu_memory(pod: object) -> tuple[int, int]:
    """(CPU millicores, memory MiB) a pod asks for as kube-scheduler counts them: the larger of
    its app containers' sum and its largest init container (component-helpers
    ``resource.PodRequests``, sidecars left as init containers here). Raises
    :class:`PodRequestError` naming the field for a shape or quantity that is not a pod's."""
    spec = _object("spec", _object("", pod).get("spec"))
    totals: dict[bool, list[int]] = {True: [0, 0], False: [0, 0]}
    for key, init in (("initContainers", True), ("containers", False)):
        for i, container in enumerate(_list(f"spec.{key}", spec.get(key))):
            path = f"spec.{key}[{i}]"
            resources = _object(f"{path}.resources", _object(path, container).get("resources", {}))
            limits = _object(f"{path}.resources.limits", resources.get("limits", {}))
            requests = _object(f"{path}.resources.requests", resources.get("requests", {}))
            cpu, memory = _cpu_milli(path, requests, limits), _memory_mib(path, requests, limits)
            got = totals[init]
            if init:
                got[0], got[1] = max(got[0], cpu), max(got[1], memory)
            else:
                got[0], got[1] = got[0] + cpu, got[1] + memory
    return max(totals[True][0], totals[False][0]), max(totals[True][1], totals[False][1])


Given = dict["Counts", tuple[str, object]]  # what a container gives: path and raw value


def _container(
    path: str,
    ctr: Mapping[str, object],
    index: int,
    role: Role,
    annotations: Mapping[str, str],
    pod_base: _PodBase,
) -> ContainerDemand | None:
    resources = _object(f"{path}.resources", ctr.get("resources", {}))
    limits = _object(f"{path}.resources.limits", resources.get("limits", {}))
    requests = _object(f"{path}.resources.requests", resources.get("requests", {}))
    found: dict[str, Given] = {}
    kinds: dict[str, DeviceKind] = {}
    profiles: dict[str, tuple[str, object]] = {}  # MIG profile -> (path, value), limits first
    for source, table in (("limits", limits), ("requests", requests)):
        for name, value in table.items():
            entry = RESOURCES.get(name)
            profile = mig_resource_profile(name) if entry is None else None
            if profile is not None:
                profiles.setdefault(profile, (f'{path}.resources.{source}["{name}"]', value))
                entry = RESOURCES[_MIG_COUNT_OF]
            if entry is None:
                continue
            kind, counts = entry
            if source == "requests" and kind.limits_only:
                continue  # HAMi never reads it: neither do we
            slot = found.setdefault(kind.hami_type, {})
            kinds[kind.hami_type] = kind
            if profile is None and counts not in slot:  # limits first, else requests
                slot[counts] = (f'{path}.resources.{source}["{name}"]', value)
    mig = _mig_asked(path, profiles, found.get(RESOURCES[_MIG_COUNT_OF][0].hami_type, {}))
    if mig is not None:
        found[RESOURCES[_MIG_COUNT_OF][0].hami_type] = {Counts.DEVICES: mig[1]}
    asked = {t: v for t, v in found.items() if _count(v) != 0}
    for hami_type, values in found.items():
        shares = {
            c: v
            for c, v in values.items()
            if c in (Counts.MEMORY, Counts.MEMORY_PERCENT, Counts.CORES)
        }
        if hami_type not in asked and shares:
            where, value = next(iter(shares.values()))
            reason = f"needs {kinds[hami_type].count} of at least 1 in the same container"
            raise PodRequestError(where, value, reason)
    chosen = _only_one(path, asked, "device type")
    if chosen is None:
        return None
    hami_type, values = chosen
    kind = kinds[hami_type]
    name = str(ctr.get("name", ""))
    explicit = bool(set(values) & {Counts.MEMORY, Counts.MEMORY_PERCENT, Counts.CORES})
    devices = _device_request(kind, values)
    if mig is not None:
        devices = DeviceRequest(count=devices.count, partition=mig[0])
    devices = _merge_devices(devices, explicit, kind, annotations, pod_base)
    cpu_milli = _cpu_milli(path, requests, limits)
    memory_mib = _memory_mib(path, requests, limits)
    try:
        request = dataclasses.replace(
            pod_base.request,
            name=name,
            cpu_milli=cpu_milli,
            memory_mib=memory_mib,
            devices=devices,
        )
    except RequestError as exc:
        raise PodRequestError(f"{path}.resources ({exc.field})", exc.value, exc.reason) from None
    priority = values.get(Counts.TASK_PRIORITY)
    task_priority = None if priority is None else _whole(*priority, low=0, high=_INT32)[0]
    return ContainerDemand(index, name, role, kind, request, task_priority)


_T = TypeVar("_T")


def _only_one(path: str, asked: Mapping[str, _T], what: str) -> tuple[str, _T] | None:
    """The one entry of ``asked`` (None when empty); more than one is refused on the
    container's resources."""
    if len(asked) > 1:
        reason = f"a container may ask for one {what}"
        raise PodRequestError(f"{path}.resources", sorted(asked), reason)
    return next(iter(asked.items()), None)


# The count a ``nvidia.com/mig-<profile>`` name stands for: the NVIDIA row's device count.
_MIG_COUNT_OF = "nvidia.com/gpu"


def _mig_asked(
    path: str, profiles: Mapping[str, tuple[str, object]], nvidia: Given
) -> tuple[str, tuple[str, object]] | None:
    """The MIG profile a container asks for by the device plugin's resource name
    (``nvidia.com/mig-3g.20gb: 1``, examples/nvidia/mig_example.yaml) and where its count is;
    None when it names none. One profile a container, and none beside HAMi's own NVIDIA names:
    one request has one profile and takes each instance whole."""
    asked = {p: v for p, v in profiles.items() if _count({Counts.DEVICES: v}) != 0}
    chosen = _only_one(path, asked, "MIG profile")
    if chosen is None:
        return None
    profile, given = chosen
    try:
        check_partition_name(given[0], profile, "mig")
    except RequestError as exc:
        raise PodRequestError(exc.field, exc.value, exc.reason) from None
    if nvidia:
        where, value = next(iter(nvidia.values()))
        reason = "a container asking for a MIG profile by name gives no other NVIDIA resource"
        raise PodRequestError(where, value, reason)
    return profile, given


def _count(values: Given) -> int:
    given = values.get(Counts.DEVICES)
    return 0 if given is None else _whole(*given, low=0, high=_INT32)[0]


def _device_request(kind: DeviceKind, values: Given) -> DeviceRequest:
    """HAMi's ContainerDeviceRequest for ``kind``, as an engine DeviceRequest."""
    count = _count(values)
    memory_mib: int | None = None
    memory_permille: int | None = None
    if Counts.MEMORY in values:
        where, raw = values[Counts.MEMORY]
        amount, suffix = _whole(where, raw, low=0, high=None)
        if suffix and kind.memory_suffix_is_bytes:
            mib = amount // (1 << 20)
        else:
            if amount > _INT32 // kind.memory_unit_mib:
                unit = "MiB" if kind.memory_unit_mib == 1 else f"{kind.memory_unit_mib} MiB units"
                reason = f"out of range: HAMi counts {kind.memory} in {unit}"
                raise PodRequestError(where, raw, reason)
            mib = amount * kind.memory_unit_mib
        if kind.per_container_totals:
            mib //= count
        memory_mib = mib or None  # 0 is "not given" in HAMi (nvidia: gpumem 0)
    if Counts.MEMORY_PERCENT in values:
        where, raw = values[Counts.MEMORY_PERCENT]
        # HAMi's webhook refuses > 100 (validateMemoryPercentage); 0 is ignored as unset.
        pct = _whole(where, raw, low=0, high=100)[0]
        if pct and memory_mib is not None:
            reason = f"give {kind.memory} or {kind.memory_percent}, not both"
            raise PodRequestError(where, raw, reason)
        memory_permille = pct * 10 or None
    cores = kind.default_cores
    cores_given = Counts.CORES in values
    if cores_given:
        where, raw = values[Counts.CORES]
        total = kind.cores_per_card * (count if kind.per_container_totals else 1)
        cores = _whole(where, raw, low=0, high=total)[0]
        if kind.per_container_totals:
            cores //= count
    whole_memory = memory_mib is None and memory_permille in (None, WHOLE)
    if kind.whole_when_unshared and whole_memory and not cores_given:
        cores = kind.cores_per_card
    core_permille = math.ceil(cores * WHOLE / kind.cores_per_card) or None
    try:
        if whole_memory and core_permille == WHOLE:
            return DeviceRequest(count=count)  # the whole card, exclusively
        return DeviceRequest(
            count=count,
            memory_mib=memory_mib,
            memory_permille=WHOLE if whole_memory else memory_permille,
            core_permille=core_permille,
        )
    except RequestError as exc:
        where = values[Counts.DEVICES][0]
        raise PodRequestError(where, exc.value, f"{exc.field}: {exc.reason}") from None


@dataclass(frozen=True, slots=True)
class _PodBase:
    """The pod-wide part of every container's request: from xpupool's annotations and HAMi's
    policies. ``devices`` is the ``devices`` part of ``xpupool.io/request`` (None: not given) and
    ``count_given`` whether it named a count."""

    request: Request
    devices: DeviceRequest | None
    count_given: bool


def _at(key: str) -> str:
    return f'metadata.annotations["{key}"]'


def _pod_base(annotations: Mapping[str, str]) -> _PodBase:
    base = Request()
    devices: DeviceRequest | None = None
    count_given = False
    text = annotations.get(ANNOTATION_REQUEST)
    if text is not None:
        where = _at(ANNOTATION_REQUEST)
        model = _request_model(where, _json_or_text(where, text))
        base = model.to_request()
        if base.replicas != 1 or base.gang:
            raise PodRequestError(where, text, "a pod is one replica: leave out replicas and gang")
        if base.cpu_milli or base.memory_mib:
            raise PodRequestError(where, text, "cpu and memory come from the containers' requests")
        if model.devices is not None:
            devices = base.devices
            count_given = model.devices.count is not None
    for key, field, value in _pod_fields(annotations):
        current = getattr(base, field)
        if current != getattr(Request(), field) and current != value:
            reason = f"conflicts with {field} in {ANNOTATION_REQUEST} ({current!r})"
            raise PodRequestError(_at(key), annotations[key], reason)
        base = dataclasses.replace(base, **{field: value})  # type: ignore[arg-type]
    if ANNOTATION_SOFTWARE in annotations:
        raw = annotations[ANNOTATION_SOFTWARE]
        soft = _request_model(_at(ANNOTATION_SOFTWARE), {"devices": {"software": _csv(raw)}})
        software = soft.to_request().devices.software
        if devices is not None and devices.software and devices.software != software:
            reason = f"conflicts with software in {ANNOTATION_REQUEST}"
            raise PodRequestError(_at(ANNOTATION_SOFTWARE), raw, reason)
        devices = dataclasses.replace(devices or DeviceRequest(count=1), software=software)
    return _PodBase(base, devices, count_given)


def _pod_fields(annotations: Mapping[str, str]) -> list[tuple[str, str, object]]:
    """(annotation, Request field, value) for each pod-wide annotation given, each value checked
    by RequestModel's own field rules."""
    out: list[tuple[str, str, object]] = []
    if ANNOTATION_SITE in annotations:
        req = _request_model(_at(ANNOTATION_SITE), {"site": _csv(annotations[ANNOTATION_SITE])})
        req_r = req.to_request()
        out.append((ANNOTATION_SITE, "sites", req_r.sites))
        out.append((ANNOTATION_SITE, "exclude_sites", req_r.exclude_sites))
    for key, field, read in (
        (ANNOTATION_QUEUE, "queue", str.strip),
        (ANNOTATION_PRIORITY, "priority", _int_text),
        (ANNOTATION_PROFILE, "node_policy", str.strip),
        (ANNOTATION_QOS, "qos", str.strip),
    ):
        if key in annotations:
            model = _request_model(_at(key), {field: read(annotations[key])})
            out.append((key, field, getattr(model.to_request(), field)))
    profile = annotations.get(ANNOTATION_PROFILE)
    hami = annotations.get(NODE_POLICY_ANNOTATION)
    if hami is not None:
        if hami.strip() not in ("binpack", "spread"):
            raise PodRequestError(_at(NODE_POLICY_ANNOTATION), hami, "known: binpack, spread")
        if profile is not None and profile.strip() != hami.strip():
            reason = f"conflicts with {ANNOTATION_PROFILE}={profile!r}"
            raise PodRequestError(_at(NODE_POLICY_ANNOTATION), hami, reason)
        if profile is None:
            out.append((NODE_POLICY_ANNOTATION, "node_policy", hami.strip()))
    gpu = annotations.get(GPU_POLICY_ANNOTATION)
    if gpu is not None:
        out.append((GPU_POLICY_ANNOTATION, "device_policy", _gpu_policy(gpu)))
    return out


def _gpu_policy(text: str) -> DevicePolicy:
    """HAMi's comma-separated GPU policy list (util.go ``PolicyContains``: ``"binpack,numa"``)."""
    where = _at(GPU_POLICY_ANNOTATION)
    chosen: set[DevicePolicy] = set()
    for item in _csv(text):
        if item not in _HAMI_GPU_POLICIES:
            raise PodRequestError(where, text, f"unknown policy {item!r}; known: binpack, spread")
        if item not in ("binpack", "spread"):
            reason = f"HAMi's {item!r} policy is not supported by xpupool; use binpack or spread"
            raise PodRequestError(where, text, reason)
        chosen.add(DevicePolicy(item))
    if len(chosen) != 1:
        raise PodRequestError(where, text, "give exactly one of binpack or spread")
    return chosen.pop()


def _merge_devices(
    devices: DeviceRequest,
    explicit: bool,
    kind: DeviceKind,
    annotations: Mapping[str, str],
    pod_base: _PodBase,
) -> DeviceRequest:
    """The container's DeviceRequest with the pod's selectors: HAMi's type/UUID lists (read with
    HAMi's comma splitting, ``CheckType``/``CheckUUID``) and ``xpupool.io/request``'s devices.
    HAMi's type lists become ``type_contains``/``exclude_type_contains``, matched as HAMi matches
    them (substrings of the registered type string), while the request annotation's models keep
    the catalog's matching; a card must pass both. HAMi's sharing mode and NUMA binding become
    ``share_modes`` and the ``same-numa`` topology. ``explicit``: the container's resources named
    memory or cores (else its shares are HAMi's defaults, which the annotation's shares replace)."""
    type_contains = _type_items(kind.use_type_key, annotations)
    exclude_type_contains = _type_items(kind.nouse_type_key, annotations)
    models = () if kind.model is None else (kind.model,)  # huawei.com/Ascend910B3 names its chip
    uuids = _items(kind.use_uuid_key, annotations)
    exclude_uuids = _items(kind.nouse_uuid_key, annotations)
    extra = pod_base.devices or DeviceRequest(count=devices.count)
    where = _at(ANNOTATION_REQUEST)
    if pod_base.count_given and extra.count != devices.count:
        reason = f"the container asks for {devices.count} with {kind.count}"
        raise PodRequestError(f"{where}.devices.count", extra.count, reason)
    if extra.vendors and kind.vendor not in extra.vendors:
        reason = f"the container asks for {kind.count} ({kind.vendor})"
        raise PodRequestError(f"{where}.devices.vendors", list(extra.vendors), reason)
    shares = (devices.memory_mib, devices.memory_permille, devices.core_permille)
    if extra.shares_specified:
        theirs = (extra.memory_mib, extra.memory_permille, extra.core_permille)
        if explicit and shares != theirs:
            reason = "conflicts with the container's device resources"
            raise PodRequestError(f"{where}.devices", list(theirs), reason)
        shares = theirs
    if models and extra.models and set(models) != set(extra.models):
        reason = f"conflicts with the container's {kind.count} ({', '.join(models)})"
        raise PodRequestError(f"{where}.devices", list(extra.models), reason)
    if uuids and extra.uuids and set(uuids) != set(extra.uuids):
        reason = f"conflicts with HAMi's UUID annotation ({', '.join(uuids)})"
        raise PodRequestError(f"{where}.devices", list(extra.uuids), reason)
    topology = extra.topology
    if _numa_bind(kind.numa_bind_key, annotations):
        assert kind.numa_bind_key is not None
        if topology is Topology.SAME_LINK_GROUP:
            reason = f"conflicts with topology {topology.value} in {ANNOTATION_REQUEST}"
            raise PodRequestError(_at(kind.numa_bind_key), annotations[kind.numa_bind_key], reason)
        topology = Topology.SAME_NUMA
    share_modes = _share_modes(kind.mode_key, annotations)
    isolated_mib = devices.isolated_mib
    if share_modes == (_MIG_MODE,) and devices.partition is None:
        isolated_mib = _mig_memory(kind, annotations, shares)
    if share_modes == (_MIG_MODE,) or devices.partition is not None:
        shares, share_modes = (None, None, None), ()  # a partition is taken whole
    try:
        return DeviceRequest(
            count=devices.count,
            memory_mib=shares[0],
            memory_permille=shares[1],
            core_permille=shares[2],
            partition=devices.partition,
            isolated_mib=isolated_mib,
            vendors=(kind.vendor,),
            models=models or extra.models,
            exclude_models=extra.exclude_models,
            uuids=uuids or extra.uuids,
            exclude_uuids=tuple(dict.fromkeys((*exclude_uuids, *extra.exclude_uuids))),
            type_contains=type_contains,
            exclude_type_contains=exclude_type_contains,
            min_card_mib=extra.min_card_mib,
            max_card_mib=extra.max_card_mib,
            software=extra.software,
            topology=topology,
            share_modes=share_modes,
        )
    except RequestError as exc:
        raise PodRequestError(f"{where}.{exc.field}", exc.value, exc.reason) from None


def _mig_memory(
    kind: DeviceKind, annotations: Mapping[str, str], shares: tuple[int | None, ...]
) -> int:
    """The memory a pod in HAMi's dynamic MIG mode asks its instance to hold
    (examples/nvidia/dynamic_mig_example.yaml: ``nvidia.com/vgpu-mode: mig`` and
    ``nvidia.com/gpumem``); HAMi takes the smallest profile that holds it (``selectMigCandidate``),
    as an ``isolated`` request does. Its cores come with the profile, so a cores share is
    dropped, as HAMi drops it; without a memory amount there is nothing to choose a profile by."""
    assert kind.mode_key is not None
    if shares[0] is None:
        reason = f"a pod in MIG mode gives {kind.memory}: the memory its instance must hold"
        raise PodRequestError(_at(kind.mode_key), annotations[kind.mode_key], reason)
    return shares[0]


def _share_modes(key: str | None, annotations: Mapping[str, str]) -> tuple[str, ...]:
    """The card modes a container of a type with a sharing-mode annotation (``vgpu-mode``) may
    take. HAMi's ``checkType`` takes a card whose registered mode occurs in the annotation's text
    (``"hami-core,mps"`` takes both); without the annotation, any mode, of which xpupool places on
    those it models (HAMi-core and MPS: both are memory and core shares, enforced by HAMi-core or
    by MPS). A text that names only ``mig`` gives ``("mig",)``: the pod asks for MIG instances
    (an ``isolated`` request); one naming no mode at all is refused (HAMi would leave the pod
    pending for ever)."""
    if key is None:
        return ()
    text = annotations.get(key)
    if text is None:
        return _PLACED_MODES
    asked = [mode for mode in _HAMI_MODES if mode in text]
    placed = tuple(mode for mode in asked if mode in _PLACED_MODES)
    if not placed and asked:
        return (_MIG_MODE,)
    if not placed:
        reason = f"names no mode a card is registered in ({', '.join(_HAMI_MODES)})"
        raise PodRequestError(_at(key), _short(text), reason)
    return placed


def _numa_bind(key: str | None, annotations: Mapping[str, str]) -> bool:
    """HAMi's NUMA binding (``assertNuma``: ``strconv.ParseBool`` of the annotation, true binds a
    container's cards to one NUMA node). HAMi reads a text Go cannot parse as false; it is
    refused here instead, naming the annotation."""
    if key is None or key not in annotations:
        return False
    value = go_bool(annotations[key])
    if value is None:
        reason = "expected true or false (as Go's strconv.ParseBool reads it: 1, t, true, ...)"
        raise PodRequestError(_at(key), _short(annotations[key]), reason)
    return value


def _type_items(key: str | None, annotations: Mapping[str, str]) -> tuple[str, ...]:
    """HAMi's type list, as ``CheckType`` (pkg/device/devices.go) reads it: blank means no
    constraint; else split on ``,``, each item trimmed, empty items never match. The items are
    kept as written (``!`` included: HAMi looks for it in the type string) for a substring match
    against the registered type; a non-blank list with no item (``" , "``) matches no card in
    HAMi, so the pod is refused here, naming the annotation, instead of waiting for ever."""
    if key is None or not annotations.get(key, "").strip():
        return ()
    items = _csv(annotations[key])
    where = _at(key)
    if not items:
        reason = "lists no card type, so no card matches it (HAMi's CheckType)"
        raise PodRequestError(where, annotations[key], reason)
    if len(items) > MAX_LIST_ITEMS:
        raise PodRequestError(where, len(items), f"more than {MAX_LIST_ITEMS} items")
    for i, item in enumerate(items):
        if len(item) > MAX_ITEM_CHARS:
            raise PodRequestError(f"{where}[{i}]", item[:MAX_ITEM_CHARS], "not a card type")
    return tuple(dict.fromkeys(items))


def _items(key: str | None, annotations: Mapping[str, str]) -> tuple[str, ...]:
    if key is None or key not in annotations:
        return ()
    items = _csv(annotations[key])
    where = _at(key)
    if len(items) > MAX_LIST_ITEMS:
        raise PodRequestError(where, len(items), f"more than {MAX_LIST_ITEMS} items")
    for i, item in enumerate(items):
        if len(item) > MAX_ITEM_CHARS or item.startswith("!"):
            raise PodRequestError(f"{where}[{i}]", item[:MAX_ITEM_CHARS], "not a model or UUID")
    return tuple(items)


def _csv(text: str) -> list[str]:
    """HAMi's lists: split on ',', trim, drop empty items (an empty list means no constraint)."""
    return [item.strip() for item in text.split(",") if item.strip()]


def _int_text(text: str) -> object:
    stripped = text.strip()
    return int(stripped) if re.fullmatch(r"[+-]?[0-9]{1,19}", stripped) else text


def _json_or_text(where: str, text: str) -> object:
    if not text.lstrip().startswith("{"):
        return text
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise PodRequestError(where, text[:100], f"not valid JSON: {exc}") from None


def _request_model(where: str, data: object) -> RequestModel:
    try:
        return RequestModel.model_validate(data)
    except (ValidationError, RecursionError) as exc:
        if isinstance(exc, RecursionError):
            raise PodRequestError(where, "...", "nested too deeply") from None
        err = request_error(exc, "")
        field = where if not err.field else f"{where}.{err.field}"
        raise PodRequestError(field, err.value, err.reason) from None


def _cpu_milli(path: str, requests: Mapping[str, object], limits: Mapping[str, object]) -> int:
    """The container's CPU request in millicores, rounded up as kube's ``MilliValue``; limits
    stand in when requests are absent, as the API server defaults them."""
    for source, table in (("requests", requests), ("limits", limits)):
        if "cpu" in table:
            amount = _quantity(f'{path}.resources.{source}["cpu"]', table["cpu"])
            return math.ceil(amount * 1000)
    return 0


def _memory_mib(path: str, requests: Mapping[str, object], limits: Mapping[str, object]) -> int:
    """The container's memory request in MiB, rounded up."""
    for source, table in (("requests", requests), ("limits", limits)):
        if "memory" in table:
            amount = _quantity(f'{path}.resources.{source}["memory"]', table["memory"])
            return math.ceil(amount / (1 << 20))
    return 0


def _quantity(where: str, value: object) -> Fraction:
    amount, _ = _parse_quantity(where, value)
    if amount < 0:
        raise PodRequestError(where, value, "must not be negative")
    if amount > 1 << 62:
        raise PodRequestError(where, value, "out of range")
    return amount


def _whole(where: str, value: object, low: int, high: int | None) -> tuple[int, bool]:
    """A device quantity as HAMi's ``AsInt64`` reads it: a whole number in [low, high], and
    whether it carried a unit suffix."""
    amount, suffix = _parse_quantity(where, value)
    if amount.denominator != 1:
        raise PodRequestError(where, value, "must be a whole number")
    if amount < low:
        raise PodRequestError(where, value, f"must be at least {low}")
    if high is not None and amount > high:
        raise PodRequestError(where, value, f"must be at most {high}")
    if amount > 1 << 62:
        raise PodRequestError(where, value, "out of range")
    return int(amount), suffix


def _parse_quantity(where: str, value: object) -> tuple[Fraction, bool]:
    return parse_quantity(where, value, PodRequestError)


def _annotations(value: object) -> dict[str, str]:
    if value is None:
        return {}
    table = _object("metadata.annotations", value)
    out: dict[str, str] = {}
    size = 0
    for key, text in table.items():
        if not isinstance(text, str):
            raise PodRequestError(_at(key), _short(text), "expected a string")
        size += len(key) + len(text)
        out[key] = text
    if size > MAX_ANNOTATION_BYTES:
        reason = f"more than {MAX_ANNOTATION_BYTES} bytes"
        raise PodRequestError("metadata.annotations", size, reason)
    return out


def _object(path: str, value: object) -> Mapping[str, object]:
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise PodRequestError(path or "pod", _short(value), "expected a JSON object")
    return value


def _list(path: str, value: object) -> list[object]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise PodRequestError(path, _short(value), "expected a list")
    if len(value) > MAX_CONTAINERS:
        raise PodRequestError(path, len(value), f"more than {MAX_CONTAINERS} containers")
    return value


def _text(path: str, value: object) -> str:
    if not isinstance(value, str) or len(value) > 253:
        raise PodRequestError(path, _short(value), "expected a name")
    return value


def _short(value: object) -> object:
    text = repr(value)
    return value if len(text) <= 100 else text[:100] + "..."
