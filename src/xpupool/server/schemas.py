"""The API's wire types, shared by the server, the CLI client and the node agent.

Importable with only pydantic and ``xpupool.model`` (the CLI must not pull in FastAPI or SQLAlchemy).
Request bodies forbid unknown fields, so a typo is a 422 naming the field; responses and agent
reports are read leniently, so a newer peer cannot break an older one (STYLE.md section 4).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from xpupool.model.device import Device as DeviceRecord
from xpupool.model.errors import RequestError
from xpupool.model.request_model import MAX_SPEC_CHARS, RequestModel, read_spec
from xpupool.model.taint import Taint, check_taints, read_taint
from xpupool.model.validation import error_path, error_value, field_error
from xpupool.server.wire_values import first_unsafe, readable

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


class Incoming(BaseModel):
    """What a peer sends: no NUL byte, lone surrogate, NaN or Infinity anywhere in any field
    (``wire_values.py`` says why). The error's ``ctx`` carries the path inside the field
    (``at``) and the offending value, so the API names ``command[1]``, not all of ``command``."""

    @field_validator("*", mode="before")
    @classmethod
    def _representable(cls, value: object) -> object:
        found = first_unsafe(value)
        if found is not None:
            at, bad, reason = found
            ctx = {"reason": reason, "at": at, "value": readable(bad)}  # pydantic encodes ctx
            raise PydanticCustomError("unsafe_value", "{reason}", ctx)
        return value


class Strict(Incoming):
    """A request body: unknown fields are errors."""

    model_config = ConfigDict(extra="forbid")


class Lenient(BaseModel):
    """A response or a peer's report: unknown fields are ignored."""

    model_config = ConfigDict(extra="ignore")


class LenientIn(Incoming):
    """A peer's report taken in (a heartbeat): unknown fields are ignored, values are checked."""

    model_config = ConfigDict(extra="ignore")


class ErrorBody(Lenient):
    """Every 4xx: what was wrong, where. ``field`` is a path such as ``request.devices.memory``."""

    field: str | None = Field(None, description="Path of the offending field; null if none.")
    value: object = Field(None, description="The value that was rejected, as received.")
    reason: str = Field(description="Why it was rejected.")


# ------------------------------------------------------------------------------ tenants, tokens
DEFAULT_MAX_PENDING_JOBS = 1000
DEFAULT_MAX_REPLICAS_PER_JOB = 256
DEFAULT_MAX_PENDING_REPLICAS = 4096
"""Per-tenant limits on queued work, until the admin sets others (docs/security.md says why
these: every pending job is tried again whenever capacity frees, under the lock submissions
take, so queued work is what one tenant can make everyone else wait for)."""
DEFAULT_MAX_JOB_LOG_MIB = 64
DEFAULT_MAX_LOG_MIB = 4096
"""Per-tenant limits on the job logs the server keeps (server/job_logs.py), until the admin sets
others: one job's, all its replicas together, and all the tenant's jobs' together."""

Weight = Annotated[
    float,
    Field(
        gt=0,
        le=1000,
        description="Fair-share weight: a tenant of weight 2 may hold twice the "
        "dominant share of one of weight 1 before the other is served first. Default 1.",
    ),
]
MaxPendingJobs = Annotated[
    int,
    Field(
        ge=0,
        le=1_000_000,
        description="Most jobs the tenant may have pending (waiting to be placed); a submission "
        f"beyond is 429. 0 = none may be submitted. Default {DEFAULT_MAX_PENDING_JOBS}.",
    ),
]
MaxReplicasPerJob = Annotated[
    int,
    Field(
        ge=1,
        le=10_000,
        description="Most replicas one job of the tenant may ask for; more is 403. "
        f"Default {DEFAULT_MAX_REPLICAS_PER_JOB}.",
    ),
]
MaxPendingReplicas = Annotated[
    int,
    Field(
        ge=0,
        le=10_000_000,
        description="Most replicas, summed over the tenant's pending jobs; a submission beyond "
        f"is 429. Default {DEFAULT_MAX_PENDING_REPLICAS}.",
    ),
]

MaxJobLogMib = Annotated[
    int,
    Field(
        ge=1,
        le=1 << 20,
        description="Most MiB of log the server keeps of one job of the tenant, all its replicas"
        " together (each replica's also stays under the server's --log-cap); the rest is dropped"
        f" after a marker line. Agents keep no more of a replica either. Default"
        f" {DEFAULT_MAX_JOB_LOG_MIB}.",
    ),
]
MaxLogMib = Annotated[
    int,
    Field(
        ge=0,
        le=1 << 30,
        description="Most MiB of job logs the server keeps for the tenant, all its jobs together;"
        " a log that would pass it is cut after a marker line (room comes back as retention"
        f" forgets finished jobs). 0 = none kept. Default {DEFAULT_MAX_LOG_MIB}.",
    ),
]


class TenantIn(Strict):
    name: Name = Field(description="Tenant name, unique.")
    weight: Weight = 1.0
    max_pending_jobs: MaxPendingJobs = DEFAULT_MAX_PENDING_JOBS
    max_replicas_per_job: MaxReplicasPerJob = DEFAULT_MAX_REPLICAS_PER_JOB
    max_pending_replicas: MaxPendingReplicas = DEFAULT_MAX_PENDING_REPLICAS
    max_job_log_mib: MaxJobLogMib = DEFAULT_MAX_JOB_LOG_MIB
    max_log_mib: MaxLogMib = DEFAULT_MAX_LOG_MIB


class TenantPatch(Strict):
    """A change to a tenant: the fields given are set, the others stay (at least one)."""

    weight: Weight | None = None
    max_pending_jobs: MaxPendingJobs | None = None
    max_replicas_per_job: MaxReplicasPerJob | None = None
    max_pending_replicas: MaxPendingReplicas | None = None
    max_job_log_mib: MaxJobLogMib | None = None
    max_log_mib: MaxLogMib | None = None

    @model_validator(mode="after")
    def _something(self) -> TenantPatch:
        if not self.model_fields_set:
            raise ValueError("give at least one of " + ", ".join(type(self).model_fields))
        for name in self.model_fields_set:
            if getattr(self, name) is None:
                raise ValueError(f"{name}: null is not a value; leave it out to keep it")
        return self


class Tenant(Lenient):
    name: str
    weight: float
    created_at: float = Field(description="Unix time, seconds.")
    max_pending_jobs: int = DEFAULT_MAX_PENDING_JOBS
    max_replicas_per_job: int = DEFAULT_MAX_REPLICAS_PER_JOB
    max_pending_replicas: int = DEFAULT_MAX_PENDING_REPLICAS
    max_job_log_mib: int = DEFAULT_MAX_JOB_LOG_MIB
    max_log_mib: int = DEFAULT_MAX_LOG_MIB
    pending_jobs: int = Field(0, description="Jobs of the tenant pending now.")
    pending_replicas: int = Field(0, description="Replicas of those jobs.")
    log_bytes: int = Field(0, description="Bytes of its jobs' logs the server keeps now.")


class TokenIn(Strict):
    name: str = Field("", max_length=100, description="A label for the token; empty = none.")
    role: Literal["tenant", "agent", "metrics"] = Field(
        "tenant",
        description="'tenant' acts for the tenant; 'agent' registers one node and reports for it; "
        "'metrics' only reads /metrics (a scraper's; issued at /v1/tokens).",
    )
    node: Name | None = Field(
        None,
        description="Agent only: the node the token speaks for. Null: bound to the first node it "
        "registers or heartbeats as (for a bootstrap token: any new node).",
    )
    bootstrap: bool = Field(
        False,
        description="Agent only: a one-time token that registers one new node; the registration "
        "reply carries that node's own token, and the bootstrap token is spent.",
    )
    expires_in_s: float | None = Field(
        None, gt=0, le=10 * 365 * 86400, description="Lifetime in seconds; null = no expiry."
    )
    expires_at: float | None = Field(
        None, description="Expiry as Unix time, seconds (in the future); null = no expiry."
    )

    @model_validator(mode="after")
    def _agent_fields(self) -> TokenIn:
        if self.role != "agent" and (self.node is not None or self.bootstrap):
            raise ValueError("node and bootstrap are for role 'agent' only")
        if self.expires_in_s is not None and self.expires_at is not None:
            raise ValueError("give expires_in_s or expires_at, not both")
        return self


class Token(Lenient):
    id: int
    tenant: str | None = Field(description="The tenant it acts for; null for admin and agents.")
    role: Literal["admin", "tenant", "agent", "bootstrap", "metrics"]
    name: str
    node: str | None = Field(
        None,
        description="Agent: the node it speaks for (null: not bound yet). Bootstrap: the node it "
        "registered once spent, or the only name it may register.",
    )
    expires_at: float | None = Field(None, description="Unix time, seconds; null = never.")
    created_at: float
    revoked: bool = Field(description="Revoked by the admin, or a bootstrap token spent.")
    token: str | None = Field(
        None, description="The secret itself, shown once when the token is issued; null after."
    )


class AuditKind(StrEnum):
    """What an audit row records; each kind is kept to its own number of rows (``xpupool up
    --audit-keep``, ``--audit-keep-refused``), so one kind never evicts another's."""

    ADMIN = "admin"  # the admin's requests, and what the server did on the admin's behalf
    AGENT = "agent"  # an agent credential's registrations, bootstrap exchanges and bindings
    REFUSED = "refused"  # an agent credential's refused requests, aggregated with a count


class AuditEntry(Lenient):
    """One admin or agent action, or an agent credential's refused requests of one kind in one
    window, aggregated (docs/security.md)."""

    id: int
    at: float = Field(description="Unix time, seconds: the last occurrence.")
    token_id: int | None = Field(description="The credential; 0 = the in-process agent.")
    role: str
    tenant: str | None
    node: str | None = Field(description="The node an agent credential is bound to.")
    action: str = Field(description="The endpoint or event, e.g. 'cordon_node', 'register'.")
    target: str = Field(
        description="What it acted on: path parameters, the node, the token (the last "
        "occurrence's)."
    )
    status: int = Field(description="HTTP status of the answer (200 for an event recorded).")
    result: str = Field(description="'ok', or the reason it was refused (the last occurrence's).")
    kind: AuditKind = Field(AuditKind.ADMIN, description="What the row records (AuditKind).")
    count: int = Field(
        1,
        description="Occurrences the row stands for: 1, or a refused credential's requests "
        "from first_at to at (one row per credential, source, action and status a window).",
    )
    first_at: float | None = Field(
        None, description="Unix time, seconds: the first occurrence; null: the same as at."
    )
    source: str | None = Field(
        None, description="The client's address as the server saw it; null: not over TCP."
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


class UnlistedFlavors(StrEnum):
    ALLOW = "allow"
    DENY = "deny"


class QueuePreemption(StrEnum):
    LOWER_PRIORITY = "lower_priority"
    NEVER = "never"


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
    max_priority: int = Field(
        0,
        ge=-(1 << 31),
        le=(1 << 31) - 1,
        description="Highest priority a job in this queue may ask for; above it a submission is "
        "403. Default 0 (the default priority): jobs may lower theirs, and only a cap the admin "
        "raises lets them preempt others' default-priority work.",
    )
    preemption: QueuePreemption = Field(
        QueuePreemption.LOWER_PRIORITY,
        description="'lower_priority': a job refused for room alone may stop running jobs of "
        "strictly lower priority (whole jobs, the fewest that make room); 'never': it waits.",
    )
    unlisted_flavors: UnlistedFlavors = Field(
        UnlistedFlavors.ALLOW,
        description="Devices none of the quotas' flavours names: 'allow' = usable without quota "
        "once the listed flavours are tried; 'deny' = not usable by this queue.",
    )
    allow_unfittable: bool = Field(
        False,
        description="Accept jobs that nothing in the pool could hold even empty (they wait, "
        "'unschedulable', for nodes that can); false = refuse them at submission (422).",
    )
    profile: Name | None = Field(
        None,
        description="Placement profile (a built-in such as xpupool or binpack, or one from the "
        "server's --profile file) for the queue's jobs that name none; null = the server's "
        "default profile. An unknown name is refused.",
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
    max_priority: int = Field(0, description="Highest priority its jobs may ask for.")
    preemption: QueuePreemption = QueuePreemption.LOWER_PRIORITY
    unlisted_flavors: UnlistedFlavors = UnlistedFlavors.ALLOW
    allow_unfittable: bool = False
    profile: str | None = Field(
        None, description="Placement profile of its jobs that name none; null = the default."
    )
    quotas: list[QuotaUsage]
    pending: int = Field(0, description="Jobs waiting in this queue.")
    running: int = Field(0, description="Jobs holding devices (scheduled or running).")


# ------------------------------------------------------------------------------ jobs
class JobPhase(StrEnum):
    """Where a job is in its lifecycle (docs/jobs.md has the transition table). Only
    ``server/job_lifecycle.py`` moves a job from one phase to another."""

    PENDING = "pending"
    ADMITTED = "admitted"
    SCHEDULED = "scheduled"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    LOST = "lost"


JobState = JobPhase
"""The name clients and older code use for :class:`JobPhase`."""


class StopCause(StrEnum):
    """Why a job's replicas are stopped (or were, before they ran). Stored with the job before
    any process is signalled, so a stop survives a crash of the server."""

    CANCELLED = "cancelled"  # the user asked
    PREEMPTED = "preempted"  # a higher-priority job or a reclaiming queue needs its devices
    NODE_LOST = "node_lost"  # its node stopped heartbeating
    SET_ASIDE = "set_aside"  # the store's allocation could not be re-applied on start
    MAX_RUNTIME = "max_runtime"  # it ran longer than its max_runtime_s
    REPLICA_FAILED = "replica_failed"  # a replica exited non-zero: its siblings are stopped
    UNRUNNABLE = "unrunnable"  # the server cannot start it (stored by an older release)


class RetryCause(StrEnum):
    """What a job may be run again after (``retry_on``)."""

    NODE_LOST = "node_lost"
    PREEMPTED = "preempted"
    EXIT_NONZERO = "exit_nonzero"


DEFAULT_RETRY_ON = (RetryCause.NODE_LOST, RetryCause.PREEMPTED)
DEFAULT_BACKOFF_S = 10.0
DEFAULT_BACKOFF_MAX_S = 600.0


def _or_compact_string(schema: dict[str, Any]) -> None:
    """``request`` also takes the compact string; the schema says so beside the object."""
    schema["anyOf"].insert(1, {"type": "string", "maxLength": MAX_SPEC_CHARS})


FINAL_STATES = frozenset({JobPhase.SUCCEEDED, JobPhase.FAILED, JobPhase.CANCELLED, JobPhase.LOST})
HOLDING_STATES = frozenset({JobPhase.ADMITTED, JobPhase.SCHEDULED, JobPhase.RUNNING})


Precision = Literal["fp32", "bf16", "fp16", "fp8", "int8", "int4"]


class ModelIntent(Strict):
    """A model and a task instead of a device request: the server plans the cards
    (docs/models.md). Shared by ``POST /v1/plan`` and ``JobIn.model``."""

    name: str = Field(
        min_length=1,
        max_length=100,
        description="A model of the catalog ('qwen2.5-7b'; GET /v1/models lists them).",
    )
    task: Literal["serve", "finetune"] = Field("serve", description="What the model is for.")
    precision: Precision | None = Field(
        None, description="Weight precision; null = the model's native precision."
    )
    context: int | None = Field(
        None,
        ge=1,
        le=10_000_000,
        description="Tokens per sequence (serve) or per sample (finetune); null = min(8192, the "
        "model's maximum).",
    )
    concurrency: int = Field(
        1, ge=1, le=4096, description="Sequences served at once (serve) or the batch (finetune)."
    )
    method: Literal["full", "lora", "qlora"] | None = Field(
        None, description="Fine-tuning method; null = lora for finetune; only with finetune."
    )


class ModelJob(ModelIntent):
    """``JobIn.model``: what to serve; the server fills the job's request, image and command."""

    model_path: str | None = Field(
        None,
        min_length=1,
        max_length=1000,
        description="A local or shared path the runtime loads the weights from; null = the "
        "model's hub id (the runtime downloads it when the job runs; xpupool never does).",
    )


class PlanRow(Lenient):
    """One card type's plan (docs/models.md)."""

    device_model: str = Field(description="Catalog card name, or the name the pool prints.")
    vendor: str
    in_pool: int = Field(description="Cards of this type in the pool; 0 offline or absent.")
    card_memory_mib: int
    cards: int = Field(description="Cards in all: tensor_parallel x nodes (serve).")
    nodes: int
    tensor_parallel: int
    pipeline_parallel: int
    expert_parallel: bool
    memory_per_card_mib: int
    est_tokens_per_s: float | None = Field(
        description="Bandwidth-bound decode upper bound, all sequences together; null: unknown."
    )
    power_watts: int | None = Field(description="cards x board power; null: not published.")
    link: str = Field(description="nvlink, hccs, ... or 'pcie (slower)' for a PCIe tp group.")
    runtime: str | None = Field(description="Serving runtime for this vendor; null: none known.")
    feasible: bool
    fits_now: bool | None = Field(description="Can the pool place it now; null offline.")
    reason: str = ""


class CatalogModel(Lenient):
    """A model of the catalog (``GET /v1/models``)."""

    name: str
    aliases: list[str]
    hub_id: str
    kind: str
    params_b: float
    active_params_b: float | None
    layers: int | None
    hidden_size: int | None
    attention_heads: int | None
    kv_heads: int | None
    head_dim: int | None
    max_context: int
    native_precision: str
    precisions: list[str]
    runtimes: list[str]
    source: str


class _SpecText(str):
    """A compact request string and the request model read from it (``JobIn.spec``)."""

    read: RequestModel

    def __new__(cls, text: str, read: RequestModel) -> _SpecText:
        made = super().__new__(cls, text)
        made.read = read
        return made


class JobIn(Strict):
    """A job: what to run and what it needs. ``request`` is the request, as the JSON object or as
    the compact string (docs/request-syntax.md); ``spec`` is the same string under its older name,
    read by the same model. Give one of them; neither = CPU only."""

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
        max_length=MAX_SPEC_CHARS,
        description="Deprecated: the compact string form of 'request', e.g. 'A100:80GB:2 "
        "cuda>=12.4'; errors name 'spec.<path>'. Read into 'request' on receipt.",
        json_schema_extra={"deprecated": True},
    )
    request: RequestModel | None = Field(
        None,
        description="What each replica needs, as the JSON object or the compact string, e.g. "
        "'L20 mem=12Gi replicas=2'; null = one CPU-only replica.",
        json_schema_extra=_or_compact_string,
    )
    model: ModelJob | None = Field(
        None,
        description="A catalog model to serve instead of a request: the server plans the cards "
        "and fills request, image and command (docs/models.md). Excludes request, spec, image "
        "and command.",
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
    max_retries: int | None = Field(
        None,
        ge=0,
        le=10_000,
        description="How often the job is run again after a cause in retry_on; null = no limit "
        "(0 = never again).",
    )
    retry_on: list[RetryCause] | None = Field(
        None,
        max_length=3,
        description="Causes after which the job runs again: node_lost, preempted, exit_nonzero; "
        "null = node_lost and preempted; [] = none. node_lost needs on_node_lost 'requeue'.",
    )
    retry_backoff_s: float = Field(
        DEFAULT_BACKOFF_S,
        ge=0,
        le=86_400,
        description="Seconds before the first retry after a non-zero exit; doubles per retry.",
    )
    retry_backoff_max_s: float = Field(
        DEFAULT_BACKOFF_MAX_S, ge=0, le=7 * 86_400, description="Cap of that wait, seconds."
    )
    max_runtime_s: float | None = Field(
        None,
        gt=0,
        le=366 * 86_400,
        description="Seconds a run may last before it is stopped and the job fails with cause "
        "max_runtime; null = no limit.",
    )
    _request_field: str = PrivateAttr("request")

    @field_validator("spec")
    @classmethod
    def _spec_reads(cls, text: str | None) -> str | None:
        """The compact string is checked by the request model, errors at ``spec.<path>``; the
        model read is kept with the text, so that it is read once."""
        if text is not None:
            try:
                return _SpecText(text, read_spec(str(text)))
            except ValidationError as exc:
                first = exc.errors()[0]
                at = error_path(first)
                raise field_error(str(first.get("msg")), error_value(first), at) from None
        return text

    @model_validator(mode="after")
    def _one_request_form(self) -> JobIn:
        if self.spec is not None and self.request is not None:
            raise ValueError("give 'spec' or 'request', not both")
        if self.model is not None:
            for other in ("request", "spec", "image", "command"):
                if getattr(self, other):
                    reason = f"give 'model' or '{other}', not both: the model fills {other}"
                    raise field_error(reason, getattr(self, other), other)
        if self.spec is not None:
            spec = self.spec
            read = spec.read if isinstance(spec, _SpecText) else RequestModel.model_validate(spec)
            self.request = read
            self.spec, self._request_field = None, "spec"
        for key in self.env:
            if not key or "=" in key or "\0" in key:
                raise ValueError(f"env: invalid variable name {key!r}")
        if self.retry_on is not None and len(set(self.retry_on)) != len(self.retry_on):
            raise field_error("names a cause twice", self.retry_on, "retry_on")
        if self.on_node_lost == "fail" and RetryCause.NODE_LOST in (self.retry_on or ()):
            raise field_error(
                "node_lost cannot be retried when on_node_lost is 'fail'",
                self.retry_on,
                "retry_on",
            )
        if self.retry_backoff_max_s < self.retry_backoff_s:
            raise field_error(
                "must be at least retry_backoff_s", self.retry_backoff_max_s, "retry_backoff_max_s"
            )
        return self

    @property
    def request_field(self) -> str:
        """Where the request came from ('request', or 'spec' for the older name), for errors
        found after parsing (an unknown model, a policy the server does not have)."""
        return self._request_field


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
    attempts: int = Field(0, description="How often it was started (each run counts one).")
    retries: int = Field(0, description="How often it was run again after a cause in retry_on.")
    stop_cause: StopCause | None = Field(
        None, description="Why its replicas are being (or were) stopped; null = not stopped."
    )
    max_retries: int | None = None
    retry_on: list[RetryCause] = Field(default_factory=list)
    max_runtime_s: float | None = None
    not_before: float | None = Field(
        None, description="Unix time before which a pending retry is not placed; null = now."
    )
    created_at: float
    updated_at: float
    events: list[JobEvent] = Field(default_factory=list)


# ------------------------------------------------------------------------------ fleet
class DeviceIn(Strict):
    """A device as an agent reports it and as the store keeps it: the one wire form of the
    engine's :class:`~xpupool.model.device.Device`. A probe's record (``probes.base.DeviceInfo``,
    with its live metrics) becomes a Device in ``DeviceInfo.to_device``; :meth:`from_device` and
    :meth:`to_device` are the only conversions between this form and the engine's."""

    uuid: str = Field(min_length=1, max_length=200)
    vendor: str = Field(
        min_length=1, max_length=40, description="Vendor key or alias ('nvidia', 'ascend')."
    )
    model: str = Field(min_length=1, max_length=200, description="As the vendor tool prints it.")
    memory_mib: int = Field(gt=0, le=1 << 30, description="Device memory, MiB.")
    index: int = Field(0, ge=0, le=4096, description="The vendor tool's index on the host.")
    compute_units: int = Field(0, ge=0, le=1 << 20, description="SMs, AI cores...; 0 = unknown.")
    driver_version: str | None = Field(None, max_length=100)
    runtimes: dict[str, str] = Field(
        default_factory=dict, description="Highest runtime versions served: {'cuda': '12.4'}."
    )
    numa_node: int | None = Field(None, ge=0, le=4096)
    link_group: str | None = Field(
        None, max_length=200, description="Fast-link domain on the node; null = PCIe only."
    )
    healthy: bool = True
    max_tasks: int | None = Field(
        default=None,
        ge=1,
        le=1 << 20,
        description="The most tasks (device shares) that may share this card at once (HAMi's "
        "deviceSplitCount); null = no limit.",
    )
    memory_overcommit: float = Field(
        default=1.0,
        ge=1.0,
        allow_inf_nan=False,
        description="Over-commit factor of the card's memory: at most floor(memory_mib x factor) "
        "MiB is granted to jobs. 1.0 (the default): none.",
    )
    cores_overcommit: float = Field(
        default=1.0,
        ge=1.0,
        allow_inf_nan=False,
        description="Over-commit factor of the card's compute: at most floor(1000 x factor) "
        "thousandths are granted to jobs. 1.0 (the default): none.",
    )

    def to_device(self) -> DeviceRecord:
        """The engine's record; raises ``RequestError`` for a vendor no alias names."""
        return DeviceRecord(**self.model_dump())

    @classmethod
    def from_device(cls, d: DeviceRecord) -> DeviceIn:
        """The wire form of an engine record (already valid: not checked again)."""
        return cls.model_construct(
            uuid=d.uuid,
            vendor=d.vendor,
            model=d.model,
            memory_mib=d.memory_mib,
            index=d.index,
            compute_units=d.compute_units,
            driver_version=d.driver_version,
            runtimes=dict(d.runtimes),
            numa_node=d.numa_node,
            link_group=d.link_group,
            healthy=d.healthy,
            max_tasks=d.max_tasks,
            memory_overcommit=d.memory_overcommit,
            cores_overcommit=d.cores_overcommit,
        )


MAX_TAINTS = 64  # per node: Kubernetes sets no bound, a pool needs a handful


class TaintIn(Strict):
    """A node taint in Kubernetes' shape (``Node.spec.taints[i]``, without ``timeAdded``)."""

    key: str = Field(
        max_length=317,
        description="A qualified name: 'gpu', or with a DNS prefix 'example.com/gpu'.",
    )
    value: str = Field(
        "",
        max_length=63,
        description="Letters, digits, '-', '_', '.'; empty (the default): the key alone.",
    )
    effect: str = Field(
        description="'NoSchedule': no work that does not tolerate it lands on the node; "
        "'PreferNoSchedule': other nodes are preferred. 'NoExecute' is refused (xpupool never "
        "evicts running work for a taint).",
        json_schema_extra={"enum": ["NoSchedule", "PreferNoSchedule"]},
    )
    _taint: Taint | None = PrivateAttr(None)

    @model_validator(mode="after")
    def _kubernetes_rules(self) -> TaintIn:
        try:
            self._taint = read_taint(
                "", {"key": self.key, "value": self.value, "effect": self.effect}
            )
        except RequestError as exc:
            raise field_error(exc.reason, exc.value, exc.field.lstrip(".")) from None
        return self

    def to_taint(self) -> Taint:
        if self._taint is None:  # built with model_construct: already valid
            self._taint = Taint(self.key, self.value, self.effect)  # type: ignore[arg-type]
        return self._taint

    @classmethod
    def from_taint(cls, t: Taint) -> TaintIn:
        made = cls.model_construct(key=t.key, value=t.value, effect=t.effect.value)
        made._taint = t
        return made


class TaintView(Lenient):
    """A node taint as the API shows it (Kubernetes' shape)."""

    key: str
    value: str = Field("", description="Empty: the key alone.")
    effect: str = Field(description="'NoSchedule' or 'PreferNoSchedule'.")


class TaintKeyIn(Strict):
    """Taints to take off a node: those with this key and effect, or with this key and any
    effect when ``effect`` is null (``kubectl taint NODE key:Effect-`` and ``key-``)."""

    key: str = Field(max_length=317)
    effect: str | None = Field(
        None, description="'NoSchedule' or 'PreferNoSchedule'; null: every effect of the key."
    )


class NodeTaintsIn(Strict):
    """A change to a node's taints, all or nothing, as ``kubectl taint`` makes one: ``remove``
    takes taints off (each must match one), ``add`` puts taints on; a taint with the key and
    effect of one the node has replaces it only with ``overwrite`` (else 409)."""

    add: list[TaintIn] = Field(default_factory=list, max_length=MAX_TAINTS)
    remove: list[TaintKeyIn] = Field(default_factory=list, max_length=MAX_TAINTS)
    overwrite: bool = Field(
        False, description="Let an added taint replace the value of one with its key and effect."
    )


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
    runtime: Literal["docker", "podman"] | None = Field(
        None,
        description="The container runtime the agent found by asking it (docker info, podman "
        "info); null = none: the node runs no container images, and image jobs go elsewhere.",
    )
    taints: list[TaintIn] = Field(
        default_factory=list,
        max_length=MAX_TAINTS,
        description="Taints the node registers with (the agent's --taint), taken when the node "
        "is first registered, as kubelet's --register-with-taints: afterwards the server's "
        "(changed with POST /v1/nodes/NAME/taints) stand, whatever a registration says.",
    )
    drain: bool = Field(
        False,
        description="When the new inventory would take a device (or CPU, memory) that live "
        "allocations hold: false refuses the registration (409, naming them; nothing changes); "
        "true cordons what is in the way at once and applies the change when its last "
        "allocation ends.",
    )

    @model_validator(mode="after")
    def _unique_uuids(self) -> NodeIn:
        seen: set[str] = set()
        for i, d in enumerate(self.devices):
            if d.uuid in seen:
                raise ValueError(f"devices[{i}].uuid: duplicate UUID {d.uuid!r}")
            seen.add(d.uuid)
        try:
            check_taints("taints", [t.to_taint() for t in self.taints])
        except RequestError as exc:
            raise field_error(exc.reason, exc.value, exc.field) from None
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
    draining: bool = Field(
        False,
        description="Gone from (or changed in) its node's last registration while allocations "
        "held it: cordoned, and dropped or changed when they end.",
    )
    allocated_memory_mib: int = Field(description="Device memory granted to jobs (committed), MiB.")
    allocated_core_permille: int = Field(
        description="Compute granted to jobs (committed), thousandths of the card."
    )
    committable_memory_mib: int = Field(
        0,
        description="The most device memory that may be granted: memory_mib times the card's "
        "memory over-commit factor, rounded down (memory_mib when there is none).",
    )
    committable_core_permille: int = Field(
        1000,
        description="The most compute that may be granted, thousandths of the card: 1000 times "
        "its cores over-commit factor, rounded down.",
    )
    jobs: list[int] = Field(
        default_factory=list,
        description="Jobs holding a share of it that the caller may see: every job for the "
        "admin, a tenant's own jobs for a tenant.",
    )
    in_use_by_others: bool = Field(
        False,
        description="Jobs not in ``jobs`` hold a share of it too: another tenant's, shown to a "
        "tenant as anonymous use (docs/security.md). Always false for the admin.",
    )
    metrics: DeviceMetrics | None = None


class DeviceShareHeld(Lenient):
    """What one replica of a job holds of a card."""

    job: int
    replica: int
    memory_mib: int = Field(description="Device memory granted, MiB.")
    core_permille: int = Field(
        description="Compute granted, thousandths of the card (0: shared best-effort)."
    )


class DeviceSample(Lenient):
    """One of a card's recent readings (its agent's heartbeat); null: the probe cannot read it."""

    t: float = Field(description="Unix time the server received the reading.")
    util_pct: float | None = None
    memory_mib_used: float | None = None
    power_w: float | None = None
    temp_c: float | None = None


class DeviceDetail(Device):
    """``GET /v1/devices/{uuid}``: the card, who holds what of it, and its recent readings."""

    shares: list[DeviceShareHeld] = Field(
        default_factory=list,
        description="Every replica holding a share of the card, of the jobs in ``jobs``: a "
        "tenant sees its own jobs' shares only.",
    )
    recent: list[DeviceSample] = Field(
        default_factory=list,
        description="The card's last readings, oldest first: at most 30, one per 10 s at most "
        "(server/live_metrics.py); empty when its agent never reported any.",
    )


# ------------------------------------------------------------------------------ fleet overview
class OverviewGroup(Lenient):
    """The cards of one model in one site. ``*_used`` and ``power_w`` sum what agents reported in
    the last two minutes; null when no card of the group reported that value."""

    site: str
    vendor: str
    device_model: str = Field(
        description="The catalog's name of the model (as registered if unknown)."
    )
    devices_total: int
    devices_allocated: int = Field(description="Cards some job holds a share of.")
    devices_busy: int = Field(
        description="Cards whose reported utilisation is at least the overview's busy_util_pct."
    )
    devices_reporting: int = Field(description="Cards with a fresh utilisation reading.")
    memory_mib_total: int = Field(description="Device memory, physical, MiB.")
    memory_mib_allocated: int = Field(description="Device memory granted to jobs, MiB.")
    memory_mib_used: int | None = Field(description="Device memory in use as probes read it.")
    core_pct_total: float = Field(description="Compute, 100 per card.")
    core_pct_allocated: float = Field(description="Compute granted to jobs, 100 per whole card.")
    core_pct_used: float | None = Field(description="Sum of reported utilisation, 100 per card.")
    power_w: float | None = Field(description="Sum of reported board power, watts.")
    cordoned: int = Field(description="Cards cordoned, or on a cordoned node.")
    unhealthy: int = Field(description="Cards their agent or the registration says are unhealthy.")


class StrandedAt(Lenient):
    """Stranded capacity of one site."""

    memory_mib: int
    core_pct: float
    devices: int


class StrandedCapacity(Lenient):
    """Idle capacity no job shape can use now (engine/fragmentation/stranded.py): the pending
    jobs' shapes plus a fixed set of common ones (services/overview.py ``COMMON_SHAPES``)."""

    memory_mib: int = Field(description="Idle device memory on such cards, MiB.")
    core_pct: float = Field(description="Idle compute on such cards, 100 per card.")
    devices: int = Field(description="In-service cards holding some of it.")
    shapes: int = Field(description="Job shapes it was measured against.")
    by_site: dict[str, StrandedAt] = Field(default_factory=dict, description="The same per site.")


class JobCounts(Lenient):
    pending: int = Field(description="Jobs waiting to be placed.")
    running: int = Field(description="Jobs whose processes run.")
    holding: int = Field(
        description="Jobs holding devices (admitted, scheduled, running, stopping)."
    )


class FleetOverview(Lenient):
    """``GET /v1/fleet/overview``. The fleet's numbers are everyone's; a tenant's
    ``pending_by_reason`` and ``jobs`` count only its own jobs (``scope`` says which)."""

    generated_at: float = Field(description="Unix time.")
    scope: Literal["fleet", "tenant"] = Field(
        description="'fleet': jobs of every tenant (admin); 'tenant': the caller's own jobs."
    )
    busy_util_pct: float = Field(description="Utilisation from which a card counts as busy.")
    groups: list[OverviewGroup]
    stranded: StrandedCapacity
    pending_by_reason: dict[str, int] = Field(
        description="Pending jobs by why they wait: the engine's reason rejecting the most nodes "
        "(among capacity reasons when there are any), or, where the engine finds room now, a "
        "waiting state (services/overview.py ``Waiting``)."
    )
    jobs: JobCounts


class HistorySeries(Lenient):
    name: str = Field(description="What is measured (docs/fleet-overview.md lists the names).")
    site: str | None = Field(description="The site; null: every site.")
    model: str | None = Field(description="The device model; null: every model.")
    points: list[tuple[float, float]] = Field(
        description="[Unix time, value] oldest first; a sample where the value was unknown is left out."
    )


class History(Lenient):
    """``GET /v1/fleet/history``."""

    window: Literal["1h", "1d", "1w"]
    step_s: float = Field(description="Seconds between two points (the tier read).")
    series: list[HistorySeries]


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
    runtime: str | None = Field(
        None, description="Container runtime for image jobs ('docker', 'podman'); null = none."
    )
    taints: list[TaintView] = Field(
        default_factory=list,
        description="Taints: work that does not tolerate a NoSchedule one is not placed here; "
        "PreferNoSchedule ones make other nodes preferred.",
    )
    deleting: bool = Field(
        False,
        description="Cordoned for deletion (DELETE /v1/nodes/NAME?drain=true): removed when its "
        "last allocation ends; uncordoning it cancels the deletion.",
    )


class NodeDeletion(Lenient):
    """The answer to ``DELETE /v1/nodes/{name}``."""

    name: str
    deleted: bool = Field(
        description="True: the node is gone (engine and store). False: a drain, the node is "
        "cordoned and is removed when the allocations in ``waiting_for`` end."
    )
    waiting_for: list[str] = Field(
        default_factory=list,
        description="What a drain waits for, one 'allocation 3 (job 7)' each; empty when deleted.",
    )
    tokens_revoked: list[int] = Field(
        default_factory=list,
        description="Ids of the agent (and bootstrap) tokens bound to the node, revoked by the "
        "deletion; empty while a drain waits (they are revoked when the node is removed).",
    )
    note: str = Field(
        "",
        description="What happens next: a cluster-file node is registered again from the file "
        "by the next `xpupool up --cluster FILE`; an agent node only with a new token.",
    )


class Registered(Node):
    """The answer to a registration."""

    token: str | None = Field(
        None,
        description="Registered with a bootstrap token: the node's own agent token, shown this "
        "once (the bootstrap token is spent); null otherwise.",
    )


class Site(Lenient):
    name: str
    nodes: int
    nodes_ready: int
    devices: int
    devices_free: int
    by_model: dict[str, int]


class Accelerator(Lenient):
    """An accelerator model a request may name: a catalog model, or a model a device of the pool
    prints that the catalog lacks (``in_catalog`` false)."""

    vendor: str = Field(description="Vendor key ('nvidia', 'huawei').")
    model: str = Field(description="Canonical catalog name, or the name the device prints.")
    family: str | None = Field(
        description="The name that selects every model of the line ('A100'); null off-catalog."
    )
    memory_gib: float | None = Field(
        description="Memory per card as marketed (binary GiB); null for a model off the catalog."
    )
    aliases: list[str] = Field(description="Other names the vendor tools print for it.")
    in_catalog: bool
    in_pool: int | None = Field(
        description="Devices of this model registered in the pool (cordoned and lost nodes "
        "included); null when listed without a server."
    )


# ------------------------------------------------------------------------------ agent protocol
AGENT_PROTOCOL = 2
"""The agent protocol's version: agents send it in ``AGENT_PROTOCOL_HEADER``; the server refuses
any other with 426. 1 was the protocol before node-bound credentials (no header)."""
AGENT_PROTOCOL_HEADER = "X-Xpupool-Agent-Protocol"
BOOTSTRAP_TOKEN_PREFIX = "xpb_"
"""Bootstrap tokens start with this (others with ``xpp_``), so an agent knows it holds one."""


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
    limits: str = Field(
        default="",
        description="Which CPU/memory enforcement applies to it (e.g. 'limits: cgroup v1"
        " memory=2048Mi cpu=1500m'); empty: not reported (older agent, or it never started).",
    )
    attempt: int | None = Field(
        default=None,
        ge=1,
        description="Which run of the job this process is (Work.attempt); null from an older"
        " agent. A server adopts a running replica only when it is the job's current attempt.",
    )
    stop_cause: Literal["", "lease_expired"] = Field(
        default="",
        description="'lease_expired': its supervisor stopped it because the agent's lease on it"
        " ran out (the agent was cut off from the server); empty: any other end.",
    )


class Heartbeat(LenientIn):
    node: str
    metrics: list[DeviceMetrics] = Field(
        default_factory=list,
        max_length=256,
        description="One per registered device at most; a UUID the node did not register is 422.",
    )
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
    tenant: str = Field(default="", description="The job's tenant; empty from an older server.")
    attempt: int = Field(
        default=1,
        ge=1,
        description="Which run of the job this is (1 = the first); 1 from an older server.",
    )
    tenant_index: int | None = Field(
        default=None,
        ge=0,
        description="The tenant's stable index: a root agent runs the job as uid"
        " (first of --job-uid-range + index). None from an older server: such work is refused"
        " by a root agent rather than run under a uid another tenant may share.",
    )
    log_cap_bytes: int | None = Field(
        default=None,
        ge=0,
        description="Most bytes of output the server keeps of this job (its tenant's"
        " max_job_log_mib): the agent keeps no more of the replica's log than this or its own"
        " --log-cap, whichever is lower. None from an older server: the agent's cap.",
    )


class HeartbeatReply(Lenient):
    run: list[Work] = Field(default_factory=list, description="Replicas to start if not running.")
    stop: list[tuple[int, int]] = Field(
        default_factory=list, description="(job_id, replica) to stop: SIGTERM, then SIGKILL."
    )
    heartbeat_s: float = Field(description="How often the server expects a heartbeat.")
    lease_s: float | None = Field(
        default=None,
        gt=0,
        description="How long after sending this heartbeat the node's replicas may run without"
        " another one answered (their supervisors stop them then); null from an older server.",
    )
    lease_grace_s: float | None = Field(
        default=None,
        ge=0,
        description="Seconds from SIGTERM to SIGKILL when a lease runs out; the server requeues"
        " a silent node's jobs only after lease_s + lease_grace_s and a margin.",
    )
