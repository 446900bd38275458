"""The API's wire types, shared by the server, the CLI client and the node agent.

Importable with only pydantic and ``xpupool.model`` (the CLI must not pull in FastAPI or SQLAlchemy).
Request bodies forbid unknown fields, so a typo is a 422 naming the field; responses and agent
reports are read leniently, so a newer peer cannot break an older one (STYLE.md section 4).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

NAME_PATTERN = r"^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$"
Name = Annotated[
    str,
    Field(
        pattern=NAME_PATTERN,
        max_length=63,
        description="Lower-case letters, digits, '.', '_' and '-'; 1 to 63 characters, "
        "starting and ending with a letter or digit.",
    ),
]


class Strict(BaseModel):
    """A request body: unknown fields are errors."""

    model_config = ConfigDict(extra="forbid")


class Lenient(BaseModel):
    """A response or a peer's report: unknown fields are ignored."""

    model_config = ConfigDict(extra="ignore")


class ErrorBody(Lenient):
    """Every 4xx: what was wrong, where. ``field`` is a path such as ``request.devices.memory``."""

    field: str | None = Field(None, description="Path of the offending field; null if none.")
    value: object = Field(None, description="The value that was rejected, as received.")
    reason: str = Field(description="Why it was rejected.")


# ------------------------------------------------------------------------------ tenants, tokens
class TenantIn(Strict):
    name: Name = Field(description="Tenant name, unique.")
    weight: float = Field(
        1.0,
        gt=0,
        le=1000,
        description="Fair-share weight: a tenant of weight 2 may hold twice the "
        "dominant share of one of weight 1 before the other is served first. Default 1.",
    )


class Tenant(Lenient):
    name: str
    weight: float
    created_at: float = Field(description="Unix time, seconds.")


class TokenIn(Strict):
    name: str = Field("", max_length=100, description="A label for the token; empty = none.")
    role: Literal["tenant", "agent"] = Field(
        "tenant",
        description="'tenant' acts for the tenant; 'agent' may register nodes and report for them.",
    )


class Token(Lenient):
    id: int
    tenant: str | None = Field(description="The tenant it acts for; null for admin and agents.")
    role: Literal["admin", "tenant", "agent"]
    name: str
    created_at: float
    revoked: bool
    token: str | None = Field(
        None, description="The secret itself, shown once when the token is issued; null after."
    )


# ------------------------------------------------------------------------------ queues
class QuotaResource(StrEnum):
    DEVICES = "devices"
    DEVICE_MEMORY_MIB = "device_memory_mib"
    CORES_PERMILLE = "cores_permille"


class QuotaIn(Strict):
    flavor: str = Field(
        min_length=1,
        max_length=63,
        description="Which devices: a vendor key ('nvidia'), a model or family the catalog knows "
        "('A100', '910B'), or '*' for any device.",
    )
    resource: QuotaResource = Field(
        description="'devices' (count), 'device_memory_mib' (MiB) or 'cores_permille' "
        "(thousandths of a device's compute)."
    )
    nominal: int = Field(ge=0, le=1 << 50, description="Guaranteed amount.")
    borrowing_limit: int | None = Field(
        None,
        ge=0,
        le=1 << 50,
        description="Most this queue may borrow from its cohort on top of nominal; "
        "null = no limit, 0 = never borrow. Must be null when the queue has no cohort.",
    )


class QueueIn(Strict):
    name: Name = Field(description="Queue name, unique across tenants.")
    tenant: Name = Field(description="The tenant that owns the queue.")
    quotas: list[QuotaIn] = Field(
        default_factory=list,
        max_length=64,
        description="Quotas by (flavor, resource). Flavours are tried in the order they first "
        "appear. Empty = no limit: any device, as much as fits.",
    )
    cohort: Name | None = Field(
        None, description="Queues in one cohort lend each other unused nominal quota; null = none."
    )

    @model_validator(mode="after")
    def _borrowing_needs_cohort(self) -> QueueIn:
        if self.cohort is None:
            for i, q in enumerate(self.quotas):
                if q.borrowing_limit not in (None, 0):
                    raise ValueError(
                        f"quotas[{i}].borrowing_limit must be null or 0 when cohort is null"
                    )
        seen: set[tuple[str, str]] = set()
        for i, q in enumerate(self.quotas):
            key = (q.flavor, q.resource.value)
            if key in seen:
                raise ValueError(f"quotas[{i}]: a second quota for {key[0]}/{key[1]}")
            seen.add(key)
        return self


class QuotaUsage(Lenient):
    flavor: str
    resource: QuotaResource
    nominal: int
    borrowing_limit: int | None
    used: int = Field(description="Charged by the queue's running allocations.")


class Queue(Lenient):
    name: str
    tenant: str
    cohort: str | None
    quotas: list[QuotaUsage]
    pending: int = Field(0, description="Jobs waiting in this queue.")
    running: int = Field(0, description="Jobs holding devices (scheduled or running).")


# ------------------------------------------------------------------------------ jobs
class JobState(StrEnum):
    PENDING = "pending"
    ADMITTED = "admitted"
    SCHEDULED = "scheduled"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    LOST = "lost"


FINAL_STATES = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED, JobState.LOST})
HOLDING_STATES = frozenset({JobState.ADMITTED, JobState.SCHEDULED, JobState.RUNNING})


class JobIn(Strict):
    """A job: what to run and what it needs. Give the devices as ``spec`` (the compact syntax,
    docs/request-syntax.md) or ``request`` (the JSON form), not both; neither = CPU only."""

    name: str = Field("", max_length=200, description="A label; empty = 'job-<id>'.")
    command: list[str] = Field(
        default_factory=list,
        max_length=1000,
        description="argv of the process the agent starts; empty = the image's entry point.",
    )
    image: str | None = Field(
        None, max_length=500, description="Container image reference; null = run on the host."
    )
    env: dict[str, str] = Field(
        default_factory=dict, description="Extra environment variables for the process."
    )
    spec: str | None = Field(
        None,
        max_length=2000,
        description="Compact request, e.g. 'A100:80GB:2 cuda>=12.4' or 'L20 mem=12Gi replicas=2'.",
    )
    request: dict[str, object] | None = Field(
        None,
        description="The JSON request form (cpu, memory, devices{...}, replicas, gang, "
        "node_policy, device_policy); see docs/request-syntax.md.",
    )
    queue: Name | None = Field(None, description="Queue; null = the queue named after the tenant.")
    priority: int | None = Field(
        None,
        ge=-(1 << 31),
        le=(1 << 31) - 1,
        description="Higher runs first and may preempt lower; null = the request's (default 0).",
    )
    on_node_lost: Literal["requeue", "fail"] = Field(
        "requeue", description="What happens when the job's node stops heartbeating."
    )
    tenant: Name | None = Field(
        None, description="Admin only: submit on behalf of this tenant. Null = the token's tenant."
    )

    @model_validator(mode="after")
    def _one_request_form(self) -> JobIn:
        if self.spec is not None and self.request is not None:
            raise ValueError("give 'spec' or 'request', not both")
        for key in self.env:
            if not key or "=" in key or "\0" in key:
                raise ValueError(f"env: invalid variable name {key!r}")
        return self


class JobEvent(Lenient):
    at: float = Field(description="Unix time, seconds.")
    state: JobState
    reason: str


class DeviceAssignment(Lenient):
    uuid: str
    index: int
    vendor: str
    model: str
    memory_mib: int = Field(description="Device memory granted on this card.")
    core_permille: int = Field(description="Compute granted, thousandths of the card.")
    card_memory_mib: int


class ReplicaAssignment(Lenient):
    replica: int
    allocation_id: int
    node: str
    cpu_milli: int
    memory_mib: int
    devices: list[DeviceAssignment]


class Job(Lenient):
    id: int
    name: str
    tenant: str
    queue: str
    state: JobState
    reason: str = Field(description="Why it is in this state (for pending: what stops it).")
    priority: int
    request: dict[str, object] = Field(description="The canonical JSON request.")
    command: list[str]
    image: str | None
    env: dict[str, str]
    on_node_lost: str
    flavor: str | None = None
    assignments: list[ReplicaAssignment] = Field(default_factory=list)
    exit_code: int | None = None
    attempts: int = Field(0, description="How often it was requeued (preemption, lost node).")
    created_at: float
    updated_at: float
    events: list[JobEvent] = Field(default_factory=list)


# ------------------------------------------------------------------------------ fleet
class DeviceIn(Strict):
    uuid: str = Field(min_length=1, max_length=200)
    vendor: str = Field(min_length=1, max_length=40)
    model: str = Field(min_length=1, max_length=200, description="As the vendor tool prints it.")
    memory_mib: int = Field(gt=0, le=1 << 30)
    index: int = Field(0, ge=0, le=4096)
    compute_units: int = Field(0, ge=0, le=1 << 20)
    driver_version: str | None = Field(None, max_length=100)
    runtimes: dict[str, str] = Field(default_factory=dict)
    numa_node: int | None = Field(None, ge=0, le=4096)
    link_group: str | None = Field(None, max_length=200)
    healthy: bool = True


class NodeIn(Strict):
    """A node as an agent registers it."""

    name: Name
    site: Name = "default"
    cpu_milli: int = Field(ge=0, le=1 << 40, description="CPU capacity, millicores.")
    memory_mib: int = Field(ge=0, le=1 << 50, description="Host memory, MiB.")
    labels: dict[str, str] = Field(default_factory=dict)
    arch: str = Field("", max_length=40)
    os: str = Field("", max_length=200)
    devices: list[DeviceIn] = Field(default_factory=list, max_length=256)

    @model_validator(mode="after")
    def _unique_uuids(self) -> NodeIn:
        seen: set[str] = set()
        for i, d in enumerate(self.devices):
            if d.uuid in seen:
                raise ValueError(f"devices[{i}].uuid: duplicate UUID {d.uuid!r}")
            seen.add(d.uuid)
        return self


class DeviceMetrics(Lenient):
    """Live readings; a field the probe cannot read is null (shown as absent, never as zero)."""

    uuid: str
    memory_used_mib: int | None = None
    utilization_pct: float | None = None
    power_w: float | None = None
    temperature_c: float | None = None
    healthy: bool | None = None


class Device(Lenient):
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
    cordoned: bool
    allocated_memory_mib: int
    allocated_core_permille: int
    jobs: list[int] = Field(default_factory=list, description="Jobs holding a share of it.")
    metrics: DeviceMetrics | None = None


class NodeStatus(StrEnum):
    READY = "ready"
    LOST = "lost"


class Node(Lenient):
    name: str
    site: str
    status: NodeStatus
    schedulable: bool
    source: str = Field(
        description="'agent' (registered by a node agent) or 'cluster' (simulated)."
    )
    cpu_milli: int
    memory_mib: int
    cpu_allocated_milli: int
    memory_allocated_mib: int
    labels: dict[str, str]
    arch: str
    os: str
    devices: int
    devices_free: int = Field(description="Devices with nothing allocated on them.")
    last_heartbeat: float | None


class Site(Lenient):
    name: str
    nodes: int
    nodes_ready: int
    devices: int
    devices_free: int
    by_model: dict[str, int]


# ------------------------------------------------------------------------------ agent protocol
class ReplicaReport(Lenient):
    """What the agent knows of one replica it was given."""

    job_id: int
    replica: int
    state: Literal["running", "succeeded", "failed", "stopped"]
    exit_code: int | None = None
    reason: str = ""
    pid: int | None = None
    memory_used_mib: dict[str, int] = Field(
        default_factory=dict, description="Per device UUID, when the probe can measure it."
    )


class Heartbeat(Lenient):
    node: str
    metrics: list[DeviceMetrics] = Field(default_factory=list)
    replicas: list[ReplicaReport] = Field(default_factory=list)


class Work(Lenient):
    """One replica the agent must run on its node."""

    job_id: int
    replica: int
    name: str
    command: list[str]
    image: str | None
    env: dict[str, str] = Field(description="The job's env plus the device variables.")
    assignment: ReplicaAssignment


class HeartbeatReply(Lenient):
    run: list[Work] = Field(default_factory=list, description="Replicas to start if not running.")
    stop: list[tuple[int, int]] = Field(
        default_factory=list, description="(job_id, replica) to stop: SIGTERM, then SIGKILL."
    )
    heartbeat_s: float = Field(description="How often the server expects a heartbeat.")
