"""Jobs (``/v1/jobs``): the job's phases, stop and retry causes (the job domain's enums, read by
``server/job_lifecycle.py``, the services and the CLI), what a submission carries and what a job
looks like to its owner.

A job's placed replicas are shown in the form the agent receives them
(:class:`~xpupool.server.schemas.agent_protocol.ReplicaAssignment`), so this module imports the
agent protocol, never the other way round.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import Field, PrivateAttr, ValidationError, field_validator, model_validator

from xpupool.model.errors import RequestError
from xpupool.model.progress import MAX_RATE
from xpupool.model.qos import check_preemptible
from xpupool.model.request_model import MAX_SPEC_CHARS, RequestModel, read_spec
from xpupool.model.validation import error_path, error_value, field_error
from xpupool.server.schemas.agent_protocol import PullPolicy, ReplicaAssignment
from xpupool.server.schemas.base import Lenient, Name, Strict
from xpupool.server.schemas.models import ModelJob
from xpupool.server.schemas.volumes import MAX_JOB_VOLUMES, VolumeMount


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
    # its site stopped answering (issue 51): it keeps its devices and its quota; only its site's
    # own word (a report when it answers again) moves it on (server/site_health.py)
    UNKNOWN = "unknown"


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
    IDLE = "idle"  # its cards stayed idle as long as its idle_stop says
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
HOLDING_STATES = frozenset(
    {JobPhase.ADMITTED, JobPhase.SCHEDULED, JobPhase.RUNNING, JobPhase.UNKNOWN}
)


class _SpecText(str):
    """A compact request string and the request model read from it (``JobIn.spec``)."""

    read: RequestModel

    def __new__(cls, text: str, read: RequestModel) -> _SpecText:
        made = super().__new__(cls, text)
        made.read = read
        return made


ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]{0,254}$"
MAX_JOB_SECRETS = 32


class SecretRef(Strict):
    """One of the tenant's secrets given to the job (docs/security.md#secrets): always as a file
    in ``$XPUPOOL_SECRETS_DIR`` (named as the secret), and also as an environment variable when
    ``env`` names one."""

    name: Name = Field(description="The tenant's secret (xpupool secret set NAME).")
    env: str | None = Field(
        None,
        pattern=ENV_NAME,
        description="Also give the value as this environment variable; null = only the file.",
    )


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
    pull: PullPolicy | None = Field(
        None,
        description="When the node's agent pulls the image: if-not-present (pulled only when"
        " the node lacks it), always (before every run), never (it must be on the node); null ="
        " if-not-present. Only with an image.",
    )
    pull_secret: Name | None = Field(
        None,
        description="The tenant's secret the node's agent pulls the image with: a registry auth"
        " file (what 'podman login --authfile FILE' writes). Only with an image.",
    )
    port: int | None = Field(
        None,
        ge=0,
        le=65535,
        description="The port the process listens on. 0: on $PORT, a port of its node the agent"
        " picks (a host process binds it itself); N (an image only): on N inside its container,"
        " published on a port of its node the agent picks; null: an image's process is told $PORT"
        " and published on it, a host process gets none. The job's view shows the node's port"
        " (assignments[].ports).",
    )
    env: dict[str, str] = Field(
        default_factory=dict, description="Extra environment variables for the process."
    )
    volumes: list[VolumeMount] = Field(
        default_factory=list,
        max_length=MAX_JOB_VOLUMES,
        description="Volumes the admin declared (xpupool volume list), mounted by name.",
    )
    secrets: list[SecretRef] = Field(
        default_factory=list,
        max_length=MAX_JOB_SECRETS,
        description="The tenant's secrets the job gets, as files (and variables where asked); "
        "their values never appear in the job's views.",
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
    on_site_lost: Literal["wait", "requeue"] = Field(
        "wait",
        description="What happens to it running when every node of its site stops answering "
        "(docs/sites.md): 'wait' shows it unknown, holding its devices and quota, until the site "
        "answers; 'requeue' treats it as on a lost node (on_node_lost), so it may run elsewhere.",
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
    reservation: Name | None = Field(
        None,
        description="A reservation of the job's tenant to run in (xpupool reservation list; "
        "docs/reservations.md): the job waits for its window, runs only on its cards, and is "
        "stopped at its end (cause max_runtime); null = none.",
    )
    preemptible: bool = Field(
        False,
        description="The job may borrow cards reserved for others until their window begins, "
        "and is then preempted (cause preempted). A job whose max_runtime_s ends before a "
        "window may borrow its cards without it.",
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
        paths = [m.path for m in self.volumes]
        for i, path in enumerate(paths):
            for j, other in enumerate(paths[:i]):
                if path == other or path.startswith(other + "/") or other.startswith(path + "/"):
                    why = f"overlaps volumes[{j}].path {other!r}"
                    raise field_error(why, path, f"volumes[{i}].path")
        names = [s.name for s in self.secrets]
        for i, ref in enumerate(self.secrets):
            if names.index(ref.name) != i:
                raise field_error("names a secret twice", ref.name, f"secrets[{i}].name")
            if ref.env is not None and ref.env in self.env:
                raise field_error("is also set in env", ref.env, f"secrets[{i}].env")
            if ref.env is not None and [r.env for r in self.secrets].index(ref.env) != i:
                raise field_error("names a variable twice", ref.env, f"secrets[{i}].env")
        if self.request is not None:  # preemptible and guaranteed contradict (model/qos.py)
            try:
                check_preemptible(self.request.to_request().qos, self.preemptible)
            except RequestError as exc:
                raise field_error(exc.reason, exc.value, exc.field) from None
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


class Checkpoint(Lenient):
    """A running job's last checkpoint, as the plane keeps it (``POST /v1/jobs/{id}/checkpoint``)."""

    job_id: int
    at: float = Field(description="Unix time of the job's last checkpoint in its current run.")


class ProgressIn(Strict):
    """A running replica's rate (``POST /v1/jobs/{id}/progress``), as it would write it to its
    $XPUPOOL_PROGRESS_FILE (model/progress.py)."""

    rate: float = Field(
        gt=0,
        le=MAX_RATE,
        description="Steps or tokens per second (any unit, the same for every job of the kind:"
        " only the ratios between card models count).",
    )
    replica: int = Field(0, ge=0, le=10_000, description="Which replica runs at it; default 0.")


class Progress(Lenient):
    """What a progress report made: the job type and card model it counted for and the
    measured figure now held (issue 55); ``model`` null: not counted (a share of a card,
    cards of several models, or the tenant's figures are full)."""

    job_id: int
    kind: str = Field(description="The job type the rate counts for (the job's kind).")
    model: str | None = Field(description="The card model; null: the rate was not counted.")
    rate: float | None = Field(description="The measured figure per card, per second.")
    runs: int = Field(0, description="Runs the figure comes from.")


class JobEvent(Lenient):
    at: float = Field(description="Unix time, seconds.")
    state: JobState
    reason: str


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
    pull: PullPolicy | None = Field(None, description="Its image's pull policy; null: default.")
    pull_secret: str | None = Field(None, description="The secret its image is pulled with.")
    port: int | None = Field(
        None, description="The port its process listens on (JobIn.port); null: none asked."
    )
    env: dict[str, str]
    secrets: list[SecretRef] = Field(
        default_factory=list, description="The secrets the job gets, by name (never a value)."
    )
    volumes: list[VolumeMount] = Field(
        default_factory=list, description="The volumes the job mounts."
    )
    on_node_lost: str
    on_site_lost: str = Field("wait", description="JobIn.on_site_lost.")
    flavor: str | None = None
    site: str | None = Field(
        None,
        description="The site the plane dispatched it to, chosen among those its request allows "
        "(request.sites); null: none chosen (one site open to it, or not tried yet).",
    )
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
    reservation: str | None = Field(None, description="JobIn.reservation.")
    preemptible: bool = Field(False, description="JobIn.preemptible.")
    qos: str = Field(
        "burstable",
        description="Its QoS class, as request.qos gives it: guaranteed, burstable (the default) "
        "or best-effort (docs/jobs.md, QoS classes).",
    )
    checkpoint_at: float | None = Field(
        None,
        description="Unix time of the last checkpoint its current run reported (its "
        "$XPUPOOL_CHECKPOINT_FILE or POST /v1/jobs/{id}/checkpoint); null: none, or not running. "
        "Shown by GET /v1/jobs/{id}.",
    )
    energy_kwh: float | None = Field(
        default=None,
        description="The energy its cards drew over all its runs, kWh, from the metering records"
        " (their joules: live power readings where the agent sends them, else the power model);"
        " null: none metered yet. Shown by GET /v1/jobs/{id}.",
    )
    not_before: float | None = Field(
        None, description="Unix time before which a pending retry is not placed; null = now."
    )
    created_at: float
    updated_at: float
    events: list[JobEvent] = Field(default_factory=list)
