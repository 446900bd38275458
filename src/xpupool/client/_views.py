"""Jobs and the fleet as the client reads them: jobs, nodes, devices, sites and queues as small
frozen records, checked field by field as they are read.

The server's wire types (``server/schemas/``) are pydantic models, and building them is most of
what a CLI command used to spend before it sent its request; ``xpupool jobs``, ``job``,
``nodes``, ``devices``, ``sites``, ``queues`` and ``top`` read these instead
(tests/unit/cli/test_imports.py keeps it so). What matters is checked as the lenient models did:
every field must be there with its type unless the schema gives it a default (else
``BadAnswer`` naming it), unknown fields are ignored, and ``raw`` keeps the answer as the server
sent it for ``-o json``. tests/unit/cli/test_views.py checks that each record names
the fields of the schema it mirrors.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from xpupool.client._errors import BadAnswer

T = TypeVar("T")
_MISSING: Any = object()


class _Reader:
    """One JSON object of an answer, read field by field; a field that is missing (and has no
    default) or of the wrong type is ``BadAnswer`` naming ``where.field``."""

    def __init__(self, data: object, where: str) -> None:
        if not isinstance(data, dict):
            raise BadAnswer(where, type(data).__name__, "not an object")
        self.data: dict[str, Any] = data
        self.where = where

    def _get(self, key: str, kinds: tuple[type, ...], default: Any) -> Any:
        value = self.data.get(key, default)
        if value is _MISSING:
            raise BadAnswer(f"{self.where}.{key}", None, "missing")
        if value is default and default is not _MISSING:
            return value
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            raise BadAnswer(f"{self.where}.{key}", value, f"not {kinds[0].__name__}")
        return value

    def text(self, key: str, default: Any = _MISSING) -> str:
        return self._get(key, (str,), default)  # type: ignore[no-any-return]

    def opt_text(self, key: str) -> str | None:
        return self._get(key, (str, type(None)), None)  # type: ignore[no-any-return]

    def integer(self, key: str, default: Any = _MISSING) -> int:
        return self._get(key, (int,), default)  # type: ignore[no-any-return]

    def opt_integer(self, key: str) -> int | None:
        return self._get(key, (int, type(None)), None)  # type: ignore[no-any-return]

    def opt_float(self, key: str) -> float | None:
        value = self._get(key, (float, int, type(None)), None)
        return None if value is None else float(value)

    def flag(self, key: str, default: Any = _MISSING) -> bool:
        return self._get(key, (bool,), default)  # type: ignore[no-any-return]

    def opt_flag(self, key: str) -> bool | None:
        return self._get(key, (bool, type(None)), None)  # type: ignore[no-any-return]

    def items(self, key: str, default: Any = _MISSING) -> list[Any]:
        return self._get(key, (list,), default)  # type: ignore[no-any-return]

    def mapping(self, key: str, values: type[T]) -> dict[str, T]:
        found = self._get(key, (dict,), _MISSING)
        for k, v in found.items():
            if not isinstance(v, values) or (values is int and isinstance(v, bool)):
                raise BadAnswer(f"{self.where}.{key}.{k}", v, f"not {values.__name__}")
        return dict(found)


@dataclass(frozen=True, slots=True)
class TaintView:
    key: str
    value: str
    effect: str

    @classmethod
    def read(cls, data: object, where: str) -> TaintView:
        r = _Reader(data, where)
        return cls(r.text("key"), r.text("value", ""), r.text("effect"))


@dataclass(frozen=True, slots=True)
class NodeView:
    """A node of ``GET /v1/nodes`` (schemas/nodes.py ``Node``)."""

    name: str
    site: str
    status: str  # 'ready' or 'lost'
    schedulable: bool
    source: str
    cpu_milli: int
    memory_mib: int
    cpu_allocated_milli: int
    memory_allocated_mib: int
    labels: dict[str, str]
    arch: str
    os: str
    devices: int
    devices_free: int
    last_heartbeat: float | None
    runtime: str | None
    taints: tuple[TaintView, ...]
    deleting: bool
    raw: dict[str, Any] = field(repr=False, compare=False)
    link_domain: str | None = None

    @classmethod
    def read(cls, data: object, where: str = "node") -> NodeView:
        r = _Reader(data, where)
        return cls(
            name=r.text("name"),
            site=r.text("site"),
            status=r.text("status"),
            schedulable=r.flag("schedulable"),
            source=r.text("source"),
            cpu_milli=r.integer("cpu_milli"),
            memory_mib=r.integer("memory_mib"),
            cpu_allocated_milli=r.integer("cpu_allocated_milli"),
            memory_allocated_mib=r.integer("memory_allocated_mib"),
            labels=r.mapping("labels", str),
            arch=r.text("arch"),
            os=r.text("os"),
            devices=r.integer("devices"),
            devices_free=r.integer("devices_free"),
            last_heartbeat=r.opt_float("last_heartbeat"),
            runtime=r.opt_text("runtime"),
            taints=tuple(
                TaintView.read(t, f"{where}.taints[{i}]")
                for i, t in enumerate(r.items("taints", []))
            ),
            deleting=r.flag("deleting", False),
            raw=r.data,
            link_domain=r.opt_text("link_domain"),
        )


@dataclass(frozen=True, slots=True)
class DeviceMetricsView:
    """A card's last readings (schemas/agent_protocol.py ``DeviceMetrics``)."""

    uuid: str
    memory_used_mib: int | None
    utilization_pct: float | None
    power_w: float | None
    temperature_c: float | None
    healthy: bool | None
    health_cause: str | None = None

    @classmethod
    def read(cls, data: object, where: str) -> DeviceMetricsView:
        r = _Reader(data, where)
        return cls(
            uuid=r.text("uuid"),
            memory_used_mib=r.opt_integer("memory_used_mib"),
            utilization_pct=r.opt_float("utilization_pct"),
            power_w=r.opt_float("power_w"),
            temperature_c=r.opt_float("temperature_c"),
            healthy=r.opt_flag("healthy"),
            health_cause=r.opt_text("health_cause"),
        )


@dataclass(frozen=True, slots=True)
class DeviceView:
    """A device of ``GET /v1/devices`` (schemas/devices.py ``Device``)."""

    uuid: str
    node: str
    site: str
    index: int
    vendor: str
    model: str
    canonical_model: str | None
    memory_mib: int
    driver_version: str | None
    runtimes: dict[str, str]
    link_group: str | None
    healthy: bool
    health: str
    health_cause: str | None
    cordoned: bool
    draining: bool
    allocated_memory_mib: int
    allocated_core_permille: int
    committable_memory_mib: int
    committable_core_permille: int
    jobs: tuple[int, ...]
    in_use_by_others: bool
    metrics: DeviceMetricsView | None
    raw: dict[str, Any] = field(repr=False, compare=False)
    partition: str | None = None
    partition_of: str | None = None
    partition_start: int | None = None

    @classmethod
    def read(cls, data: object, where: str = "device") -> DeviceView:
        r = _Reader(data, where)
        jobs = r.items("jobs", [])
        for i, job in enumerate(jobs):
            if not isinstance(job, int) or isinstance(job, bool):
                raise BadAnswer(f"{where}.jobs[{i}]", job, "not int")
        metrics = r.data.get("metrics")
        return cls(
            uuid=r.text("uuid"),
            node=r.text("node"),
            site=r.text("site"),
            index=r.integer("index"),
            vendor=r.text("vendor"),
            model=r.text("model"),
            canonical_model=r.opt_text("canonical_model"),
            memory_mib=r.integer("memory_mib"),
            driver_version=r.opt_text("driver_version"),
            runtimes=r.mapping("runtimes", str),
            link_group=r.opt_text("link_group"),
            healthy=r.flag("healthy"),
            health=r.text("health", "healthy"),
            health_cause=r.opt_text("health_cause"),
            cordoned=r.flag("cordoned"),
            draining=r.flag("draining", False),
            allocated_memory_mib=r.integer("allocated_memory_mib"),
            allocated_core_permille=r.integer("allocated_core_permille"),
            committable_memory_mib=r.integer("committable_memory_mib", 0),
            committable_core_permille=r.integer("committable_core_permille", 1000),
            jobs=tuple(jobs),
            in_use_by_others=r.flag("in_use_by_others", False),
            metrics=None
            if metrics is None
            else DeviceMetricsView.read(metrics, f"{where}.metrics"),
            raw=r.data,
            partition=r.opt_text("partition"),
            partition_of=r.opt_text("partition_of"),
            partition_start=r.opt_integer("partition_start"),
        )


@dataclass(frozen=True, slots=True)
class SiteDomainView:
    """A link domain of a site (schemas/nodes.py ``SiteDomain``); ``name`` None: the site's
    nodes without one."""

    name: str | None
    nodes: int
    devices: int
    devices_free: int

    @classmethod
    def read(cls, data: object, where: str) -> SiteDomainView:
        r = _Reader(data, where)
        return cls(
            r.opt_text("name"), r.integer("nodes"), r.integer("devices"), r.integer("devices_free")
        )


@dataclass(frozen=True, slots=True)
class SiteView:
    """A site of ``GET /v1/sites`` (schemas/nodes.py ``Site``)."""

    name: str
    nodes: int
    nodes_ready: int
    devices: int
    devices_free: int
    by_model: dict[str, int]
    raw: dict[str, Any] = field(repr=False, compare=False)
    reachable: bool = True
    drained: bool = False
    kind: str = "agents"
    last_contact: float | None = None
    devices_allocated: int = 0
    pending: int = 0
    domains: tuple[SiteDomainView, ...] = ()

    @classmethod
    def read(cls, data: object, where: str = "site") -> SiteView:
        r = _Reader(data, where)
        return cls(
            name=r.text("name"),
            nodes=r.integer("nodes"),
            nodes_ready=r.integer("nodes_ready"),
            devices=r.integer("devices"),
            devices_free=r.integer("devices_free"),
            by_model=r.mapping("by_model", int),
            raw=r.data,
            reachable=r.data.get("reachable") is not False,
            drained=r.data.get("drained") is True,
            kind=r.opt_text("kind") or "agents",
            last_contact=r.opt_float("last_contact"),
            devices_allocated=r.integer("devices_allocated", 0),
            pending=r.integer("pending", 0),
            domains=tuple(
                SiteDomainView.read(d, f"{where}.domains[{i}]")
                for i, d in enumerate(r.items("domains", []))
            ),
        )


QUOTA_RESOURCES = ("devices", "device_memory_mib", "cores_permille")
"""schemas/queues.py ``QuotaResource``'s values (tests/unit/cli/test_views.py compares them)."""


@dataclass(frozen=True, slots=True)
class QuotaUsageView:
    """One quota of a queue with its use (schemas/queues.py ``QuotaUsage``)."""

    flavor: str
    resource: str  # one of QUOTA_RESOURCES
    nominal: int
    borrowing_limit: int | None
    used: int

    @classmethod
    def read(cls, data: object, where: str) -> QuotaUsageView:
        r = _Reader(data, where)
        resource = r.text("resource")
        if resource not in QUOTA_RESOURCES:
            raise BadAnswer(f"{where}.resource", resource, f"not one of {QUOTA_RESOURCES}")
        return cls(
            r.text("flavor"),
            resource,
            r.integer("nominal"),
            r.opt_integer("borrowing_limit"),
            r.integer("used"),
        )


@dataclass(frozen=True, slots=True)
class QueueView:
    """A queue of ``GET /v1/queues`` (schemas/queues.py ``Queue``)."""

    name: str
    tenant: str
    cohort: str | None
    max_priority: int
    preemption: str
    unlisted_flavors: str
    allow_unfittable: bool
    preempts_min_run: bool
    network: str | None
    profile: str | None
    quotas: tuple[QuotaUsageView, ...]
    pending: int
    running: int
    raw: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def read(cls, data: object, where: str = "queue") -> QueueView:
        r = _Reader(data, where)
        return cls(
            name=r.text("name"),
            tenant=r.text("tenant"),
            cohort=r.opt_text("cohort"),
            max_priority=r.integer("max_priority", 0),
            preemption=r.text("preemption", "lower_priority"),
            unlisted_flavors=r.text("unlisted_flavors", "allow"),
            allow_unfittable=r.flag("allow_unfittable", False),
            preempts_min_run=r.flag("preempts_min_run", False),
            network=r.opt_text("network"),
            profile=r.opt_text("profile"),
            quotas=tuple(
                QuotaUsageView.read(q, f"{where}.quotas[{i}]")
                for i, q in enumerate(r.items("quotas"))
            ),
            pending=r.integer("pending", 0),
            running=r.integer("running", 0),
            raw=r.data,
        )


def read_list(data: object, read: Callable[[object, str], T], where: str) -> list[T]:
    """A list answer read item by item with ``read(item, where[i])``."""
    if not isinstance(data, list):
        raise BadAnswer(where, type(data).__name__, "not a list")
    return [read(item, f"{where}[{i}]") for i, item in enumerate(data)]


JOB_STATES = (
    "pending", "admitted", "scheduled", "running", "succeeded", "failed", "cancelled", "lost",
    "unknown",
)  # fmt: skip
"""schemas/jobs.py ``JobPhase``'s values, in its order (tests/unit/cli/test_views.py)."""
FINAL_JOB_STATES = frozenset({"succeeded", "failed", "cancelled", "lost"})
"""schemas/jobs.py ``FINAL_STATES``: a job in one of these never changes again."""


def _job_state(r: _Reader, key: str) -> str:
    state = r.text(key)
    if state not in JOB_STATES:
        raise BadAnswer(f"{r.where}.{key}", state, f"not one of {', '.join(JOB_STATES)}")
    return state


@dataclass(frozen=True, slots=True)
class DeviceAssignmentView:
    """A card granted to a replica (schemas/agent_protocol.py ``DeviceAssignment``)."""

    uuid: str
    index: int
    vendor: str
    model: str
    memory_mib: int
    core_permille: int
    card_memory_mib: int
    partition: str | None = None

    @classmethod
    def read(cls, data: object, where: str) -> DeviceAssignmentView:
        r = _Reader(data, where)
        return cls(
            r.text("uuid"),
            r.integer("index"),
            r.text("vendor"),
            r.text("model"),
            r.integer("memory_mib"),
            r.integer("core_permille"),
            r.integer("card_memory_mib"),
            r.opt_text("partition"),
        )


@dataclass(frozen=True, slots=True)
class ReplicaAssignmentView:
    """Where one replica runs (schemas/agent_protocol.py ``ReplicaAssignment``)."""

    replica: int
    allocation_id: int
    node: str
    cpu_milli: int
    memory_mib: int
    devices: tuple[DeviceAssignmentView, ...]
    ports: tuple[int, ...] = ()

    @classmethod
    def read(cls, data: object, where: str) -> ReplicaAssignmentView:
        r = _Reader(data, where)
        ports = r.items("ports", [])  # absent from an older server
        if any(not isinstance(p, int) or isinstance(p, bool) for p in ports):
            raise BadAnswer(f"{where}.ports", ports, "not a list of port numbers")
        return cls(
            r.integer("replica"),
            r.integer("allocation_id"),
            r.text("node"),
            r.integer("cpu_milli"),
            r.integer("memory_mib"),
            tuple(
                DeviceAssignmentView.read(d, f"{where}.devices[{i}]")
                for i, d in enumerate(r.items("devices"))
            ),
            tuple(ports),
        )


@dataclass(frozen=True, slots=True)
class JobEventView:
    """A step of a job's history (schemas/jobs.py ``JobEvent``)."""

    at: float
    state: str
    reason: str

    @classmethod
    def read(cls, data: object, where: str) -> JobEventView:
        r = _Reader(data, where)
        at = r.opt_float("at")
        if at is None:
            raise BadAnswer(f"{where}.at", None, "missing")
        return cls(at, _job_state(r, "state"), r.text("reason"))


def _texts(r: _Reader, key: str) -> tuple[str, ...]:
    found = r.items(key, [])
    for i, item in enumerate(found):
        if not isinstance(item, str):
            raise BadAnswer(f"{r.where}.{key}[{i}]", item, "not str")
    return tuple(found)


@dataclass(frozen=True, slots=True)
class SecretRefView:
    """A secret a job gets (schemas/jobs.py ``SecretRef``): its name, never its value."""

    name: str
    env: str | None

    @classmethod
    def read(cls, data: object, where: str) -> SecretRefView:
        r = _Reader(data, where)
        return cls(r.text("name"), r.opt_text("env"))


@dataclass(frozen=True, slots=True)
class VolumeMountView:
    """A volume a job mounts (schemas/volumes.py ``VolumeMount``)."""

    name: str
    path: str
    read_only: bool

    @classmethod
    def read(cls, data: object, where: str) -> VolumeMountView:
        r = _Reader(data, where)
        ro = r.data.get("read_only", False)
        if not isinstance(ro, bool):
            raise BadAnswer(f"{where}.read_only", ro, "not a bool")
        return cls(r.text("name"), r.text("path"), ro)


@dataclass(frozen=True, slots=True)
class JobView:
    """A job of ``GET /v1/jobs`` (schemas/jobs.py ``Job``); ``state`` one of JOB_STATES."""

    id: int
    name: str
    tenant: str
    queue: str
    state: str
    reason: str
    priority: int
    request: dict[str, Any]
    command: tuple[str, ...]
    image: str | None
    pull: str | None
    pull_secret: str | None
    port: int | None
    env: dict[str, str]
    secrets: tuple[SecretRefView, ...]
    volumes: tuple[VolumeMountView, ...]
    on_node_lost: str
    flavor: str | None
    assignments: tuple[ReplicaAssignmentView, ...]
    exit_code: int | None
    attempts: int
    retries: int
    stop_cause: str | None
    max_retries: int | None
    retry_on: tuple[str, ...]
    max_runtime_s: float | None
    checkpoint_at: float | None
    not_before: float | None
    created_at: float
    updated_at: float
    events: tuple[JobEventView, ...]
    raw: dict[str, Any] = field(repr=False, compare=False)
    site: str | None = None  # the site the plane dispatched it to
    on_site_lost: str = "wait"
    energy_kwh: float | None = None  # what its runs drew, from the metering records
    reservation: str | None = None  # the reservation it runs in (docs/reservations.md)
    preemptible: bool = False  # may borrow reserved cards until their window begins
    qos: str = "burstable"  # its QoS class (docs/jobs.md, QoS classes)

    @classmethod
    def read(cls, data: object, where: str = "job") -> JobView:
        r = _Reader(data, where)
        created, updated = r.opt_float("created_at"), r.opt_float("updated_at")
        if created is None or updated is None:
            raise BadAnswer(f"{where}.created_at", None, "missing")
        return cls(
            id=r.integer("id"),
            name=r.text("name"),
            tenant=r.text("tenant"),
            queue=r.text("queue"),
            state=_job_state(r, "state"),
            reason=r.text("reason"),
            priority=r.integer("priority"),
            request=r.mapping("request", object),
            command=_texts(r, "command"),
            image=r.opt_text("image"),
            pull=r.opt_text("pull"),
            pull_secret=r.opt_text("pull_secret"),
            port=r.opt_integer("port"),
            env=r.mapping("env", str),
            secrets=tuple(
                SecretRefView.read(x, f"{where}.secrets[{i}]")
                for i, x in enumerate(r.items("secrets", []))
            ),
            volumes=tuple(
                VolumeMountView.read(x, f"{where}.volumes[{i}]")
                for i, x in enumerate(r.items("volumes", []))
            ),
            on_node_lost=r.text("on_node_lost"),
            on_site_lost=r.opt_text("on_site_lost") or "wait",
            site=r.opt_text("site"),
            flavor=r.opt_text("flavor"),
            assignments=tuple(
                ReplicaAssignmentView.read(a, f"{where}.assignments[{i}]")
                for i, a in enumerate(r.items("assignments", []))
            ),
            exit_code=r.opt_integer("exit_code"),
            attempts=r.integer("attempts", 0),
            retries=r.integer("retries", 0),
            stop_cause=r.opt_text("stop_cause"),
            max_retries=r.opt_integer("max_retries"),
            retry_on=_texts(r, "retry_on"),
            max_runtime_s=r.opt_float("max_runtime_s"),
            checkpoint_at=r.opt_float("checkpoint_at"),
            energy_kwh=r.opt_float("energy_kwh"),
            reservation=r.opt_text("reservation"),
            preemptible=r.flag("preemptible", False),
            qos=r.opt_text("qos") or "burstable",
            not_before=r.opt_float("not_before"),
            created_at=created,
            updated_at=updated,
            events=tuple(
                JobEventView.read(e, f"{where}.events[{i}]")
                for i, e in enumerate(r.items("events", []))
            ),
            raw=r.data,
        )
