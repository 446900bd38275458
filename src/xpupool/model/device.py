"""Devices and nodes as the management layer reports them and the engine consumes them.

These are plain frozen records: the engine converts them once into columns (``engine/state.py``).
Units are in the names: MiB for memory, millicores for CPU.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from xpupool.model.errors import RequestError
from xpupool.model.taint import Taint, check_taints
from xpupool.model.vendor import vendor_key


@dataclass(frozen=True, slots=True)
class Device:
    """One accelerator card (or one schedulable partition such as a MIG instance).

    ``model`` is the name as the vendor tool prints it; the catalog resolves it to a canonical
    model. ``runtimes`` holds the highest runtime versions the installed driver serves, when the
    tool says so (``{"cuda": "12.4"}`` from nvidia-smi, ``{"cann": "8.0.RC2"}`` from the Ascend
    toolkit); the compatibility table fills in what is missing from ``driver_version``.
    ``link_group`` names the NVLink/HCCS/xGMI domain inside the node; devices sharing a name talk
    over the fast link. None means PCIe only. ``max_tasks`` is the most tasks (device shares) that
    may share the card at once, HAMi's ``deviceSplitCount``; None: no limit.
    ``type_name`` is the type string the node registered the card under, kept verbatim because a
    request may match substrings of it (HAMi's ``DeviceInfo.Type``, ``NVIDIA-Tesla T4``, which
    ``nvidia.com/use-gputype`` matches; ``model`` holds the catalog's name, ``T4``). None: ``model``.
    ``share_mode`` is how the card is shared, as its node registered it (HAMi's
    ``DeviceInfo.Mode``: ``hami-core``, ``mps``, ``mig``); None: not stated, any mode a request
    accepts (``DeviceRequest.share_modes``) takes it.
    ``partition`` names the hardware partition profile this device is (``3g.40gb``, a MIG
    instance; ``vir05_1c_16g``, an Ascend vNPU), cut from the card ``partition_of`` (its UUID)
    starting at memory slice ``partition_start`` (MIG; None for vNPU). Such a device takes only
    requests for partitions, whole and alone (``DeviceRequest.partition``/``isolated_mib``),
    and never a software share; the catalog's geometry (``catalog/partitions.py``) says which
    profiles a model has. None: a card (or software-shared device) as before.
    ``memory_overcommit`` and ``cores_overcommit`` are the operator's over-commit factors (>= 1):
    the scheduler commits at most ``floor(memory_mib * memory_overcommit)`` MiB and
    ``floor(1000 * cores_overcommit)`` thousandths of the card (docs/capacity.md).
    """

    uuid: str
    vendor: str
    model: str
    memory_mib: int
    index: int = 0
    compute_units: int = 0
    driver_version: str | None = None
    runtimes: Mapping[str, str] = field(default_factory=dict)
    numa_node: int | None = None
    link_group: str | None = None
    healthy: bool = True
    max_tasks: int | None = None
    memory_overcommit: float = 1.0
    cores_overcommit: float = 1.0
    type_name: str | None = None
    share_mode: str | None = None
    partition: str | None = None
    partition_of: str | None = None
    partition_start: int | None = None

    def __post_init__(self) -> None:
        if not self.uuid:
            raise RequestError("uuid", self.uuid, "must not be empty")
        check_partition_fields(self.partition, self.partition_of, self.partition_start)
        if self.max_tasks is not None:
            check_max_tasks("max_tasks", self.max_tasks)
        object.__setattr__(
            self, "memory_overcommit", check_overcommit("memory_overcommit", self.memory_overcommit)
        )
        object.__setattr__(
            self, "cores_overcommit", check_overcommit("cores_overcommit", self.cores_overcommit)
        )
        object.__setattr__(self, "vendor", vendor_key(self.vendor))
        if self.memory_mib <= 0:
            raise RequestError("memory_mib", self.memory_mib, "must be more than 0")
        object.__setattr__(self, "runtimes", dict(self.runtimes))


def check_partition_fields(
    partition: str | None, partition_of: str | None, start: int | None
) -> None:
    """A partition names its profile and its card together; a start only with a partition."""
    if partition is None:
        if partition_of is not None:
            raise RequestError("partition_of", partition_of, "given without partition")
        if start is not None:
            raise RequestError("partition_start", start, "given without partition")
        return
    if not isinstance(partition, str) or not partition.strip() or partition != partition.strip():
        raise RequestError("partition", partition, "expected a profile name such as '3g.40gb'")
    if not partition_of:
        raise RequestError("partition_of", partition_of, "a partition names its card's UUID")
    if start is not None and (isinstance(start, bool) or not isinstance(start, int) or start < 0):
        raise RequestError("partition_start", start, "must be a whole number >= 0 (memory slice)")


def check_max_tasks(field: str, value: object) -> int:
    """``value`` as a task limit per card: a whole number >= 1, else a RequestError on ``field``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise RequestError(
            field, value, "must be a whole number >= 1 (tasks that may share a card)"
        )
    return value


def check_overcommit(field: str, value: object) -> float:
    """``value`` as an over-commit factor: a finite number >= 1.0, else a RequestError on
    ``field``."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise RequestError(field, value, "must be a finite number >= 1.0 (1.0: no over-commit)")
    if value < 1.0:
        raise RequestError(field, value, "must be >= 1.0: a card cannot commit less than it has")
    return float(value)


# Container runtimes a node can run image jobs with (``--runtime`` on the agent, ``runtime:`` in a
# cluster file); a node without one runs command jobs only.
CONTAINER_RUNTIMES: tuple[str, ...] = ("docker", "podman")
# A site's nodes whose images its own machinery runs (a Kubernetes site's kubelets): never an
# agent's runtime, which the agent protocol and the cluster file keep to CONTAINER_RUNTIMES.
SITE_RUNTIMES: tuple[str, ...] = ("kubernetes",)


@dataclass(frozen=True, slots=True)
class Node:
    """A host: its CPU and memory capacity and its devices. ``site`` groups nodes across sites.
    ``container_runtime`` is the runtime its agent found (one of :data:`CONTAINER_RUNTIMES`);
    None: it cannot run container images. ``cordoned_devices`` names cards of the node that take
    no new work (what runs there stays): UUIDs of other nodes' cards, or of none, change nothing.
    ``taints`` keep work that does not tolerate them off the node (``model/taint.py``), in
    Kubernetes' shape: at most one per key and effect. ``link_domain`` names the part of its site
    whose nodes share a fast network (the value of the label the site names as its link domain,
    ``engine/link_domains.py``): a gang is kept to one; None: the site names none, or the node
    lacks the label."""

    name: str
    cpu_milli: int
    memory_mib: int
    devices: tuple[Device, ...] = ()
    site: str = "default"
    labels: Mapping[str, str] = field(default_factory=dict)
    schedulable: bool = True
    container_runtime: str | None = None
    cordoned_devices: frozenset[str] = frozenset()
    taints: tuple[Taint, ...] = ()
    link_domain: str | None = None

    def __post_init__(self) -> None:
        if not self.name:
            raise RequestError("name", self.name, "must not be empty")
        if self.link_domain is not None and (
            not isinstance(self.link_domain, str) or not self.link_domain
        ):
            raise RequestError("link_domain", self.link_domain, "a non-empty name, or None")
        object.__setattr__(self, "taints", check_taints("taints", self.taints))
        known = (*CONTAINER_RUNTIMES, *SITE_RUNTIMES)
        if self.container_runtime is not None and self.container_runtime not in known:
            raise RequestError("runtime", self.container_runtime, f"known: {', '.join(known)}")
        if self.cpu_milli < 0:
            raise RequestError("cpu_milli", self.cpu_milli, "must not be negative")
        if self.memory_mib < 0:
            raise RequestError("memory_mib", self.memory_mib, "must not be negative")
        object.__setattr__(self, "devices", tuple(self.devices))
        object.__setattr__(self, "labels", dict(self.labels))
        object.__setattr__(self, "cordoned_devices", frozenset(self.cordoned_devices))
        seen: set[str] = set()
        for i, device in enumerate(self.devices):
            if device.uuid in seen:
                raise RequestError(f"devices[{i}].uuid", device.uuid, "duplicate UUID on this node")
            seen.add(device.uuid)
