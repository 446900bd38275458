"""Services (``/v1/services``): a job kept running as replicas behind one stable endpoint.

A service body carries the job each replica runs as a :class:`~xpupool.server.schemas.jobs.JobIn`
(``job``), checked by JobIn's own rules, so a service takes exactly what a job takes and says it
in the same words; the fields the service owns for its replicas (their name, tenant, retries and
node-loss policy: the controller replaces a replica that ends instead) are refused there. Around
it: the port the process listens on, the replica bounds, the readiness probe, the restart backoff
and the scaling target (docs/services.md).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import Field, field_validator, model_validator

from xpupool.model.validation import field_error
from xpupool.server.schemas.base import Lenient, Name, Strict
from xpupool.server.schemas.jobs import JobIn, JobState

MAX_REPLICAS = 64
"""A service's replicas at most: each is a job, probed every interval; a larger fleet of one
server is a deployment on its own (and the pending-job caps of its tenant still apply)."""

_OWNED_JOB_FIELDS = {
    "name": "a service names its replicas '<service>-<n>'",
    "tenant": "give the service's tenant (tenant), not the job's",
    "max_retries": "the service replaces a replica that ends: use restart",
    "retry_on": "the service replaces a replica that ends: use restart",
    "retry_backoff_s": "the service replaces a replica that ends: use restart.backoff_s",
    "retry_backoff_max_s": "the service replaces a replica that ends: use restart.backoff_max_s",
    "on_node_lost": "the service replaces a replica whose node is lost",
    "max_runtime_s": "a service's replicas run until it is deleted or changed",
    "port": "give the service's port (port), not the job's",
}


class ServiceState(StrEnum):
    """Where a service stands, worked out by its controller on each pass (docs/services.md)."""

    PENDING = "pending"  # no replica runs yet: they wait for the scheduler
    STARTING = "starting"  # replicas run, none is ready yet
    READY = "ready"  # as many ready replicas as desired
    DEGRADED = "degraded"  # some ready, fewer than desired
    RESTARTING = "restarting"  # a replica ended: its replacement waits for the backoff
    UPDATING = "updating"  # replicas of an older generation are being replaced
    STOPPED = "stopped"  # its tenant stopped it: no replica is kept until it is started


class Replicas(Strict):
    """How many replicas the service keeps: ``min`` always, up to ``max`` when busy."""

    min: int = Field(1, ge=1, le=MAX_REPLICAS, description="Replicas kept at least.")
    max: int | None = Field(
        None,
        ge=1,
        le=MAX_REPLICAS,
        description="Replicas scaled up to when busy (scaling); null = min (no scaling).",
    )

    @model_validator(mode="after")
    def _ordered(self) -> Replicas:
        if self.max is not None and self.max < self.min:
            raise field_error(f"must be at least min ({self.min})", self.max, "max")
        return self

    @property
    def upper(self) -> int:
        return self.min if self.max is None else self.max


class Readiness(Strict):
    """The HTTP probe that decides whether a replica gets requests: a GET of ``path`` on the
    replica's port answered 2xx or 3xx within ``timeout_s``. vLLM and most OpenAI-compatible
    servers answer ``/health`` once the model is loaded."""

    path: str = Field(
        "/health",
        max_length=1024,
        pattern=r"^/[\x21-\x7e]*$",
        description="Path probed (absolute, printable ASCII, no spaces).",
    )
    interval_s: float = Field(5.0, ge=0.2, le=3600, description="Seconds between two probes.")
    timeout_s: float = Field(2.0, gt=0, le=600, description="Seconds a probe waits at most.")
    failures: int = Field(
        3, ge=1, le=100, description="Consecutive failed probes that make a ready replica unready."
    )
    successes: int = Field(
        1, ge=1, le=100, description="Consecutive good probes that make a replica ready."
    )

    @model_validator(mode="after")
    def _timeout_within_interval(self) -> Readiness:
        if self.timeout_s > self.interval_s:
            why = f"must be at most interval_s ({self.interval_s:g}): one probe at a time"
            raise field_error(why, self.timeout_s, "timeout_s")
        return self


class Restart(Strict):
    """When a replica that ended is replaced: after ``backoff_s``, doubled for each replica
    that ended since, up to ``backoff_max_s``; the doubling starts over once a replica has been
    ready for ``reset_after_s``."""

    backoff_s: float = Field(2.0, ge=0, le=3600, description="Seconds before the first restart.")
    backoff_max_s: float = Field(300.0, ge=0, le=86_400, description="Cap of that wait, seconds.")
    reset_after_s: float = Field(
        60.0, ge=0, le=86_400, description="Seconds a replica stays ready before the wait resets."
    )

    @model_validator(mode="after")
    def _ordered(self) -> Restart:
        if self.backoff_max_s < self.backoff_s:
            why = f"must be at least backoff_s ({self.backoff_s:g})"
            raise field_error(why, self.backoff_max_s, "backoff_max_s")
        return self


class Scaling(Strict):
    """Replicas between min and max by requests in flight per ready replica (as dstack and
    Knative scale): up as soon as the load is over the target, down only once it has been under
    it for the whole window, and a replica taken away is drained first."""

    target_in_flight: float = Field(
        8.0, gt=0, le=100_000, description="Requests in flight per ready replica aimed at."
    )
    window_s: float = Field(
        60.0, ge=0, le=3600, description="Seconds the load must stay low before scaling down."
    )
    drain_timeout_s: float = Field(
        30.0,
        ge=0,
        le=3600,
        description="Seconds a replica taken away waits for its requests to end before it is "
        "stopped anyway.",
    )


class ServiceIn(Strict):
    """A service: the job its replicas run and how they are kept."""

    name: Name = Field(description="Unique among the tenant's services; its URL's part.")
    tenant: Name | None = Field(
        None, description="Admin only: the tenant the service belongs to; null = the token's."
    )
    job: JobIn = Field(
        description="What each replica runs (a job's fields: image, command, env, request or "
        "model, volumes, secrets, queue, priority, pull, pull_secret)."
    )
    port: int | None = Field(
        None,
        ge=1,
        le=65535,
        description="The port the process listens on inside its container (an image or a "
        "model only), published on a port of its node the agent picks; null = it listens on "
        "$PORT, that port itself (a host process always does). A catalog model's is its "
        "runtime's.",
    )
    replicas: Replicas = Field(default_factory=lambda: Replicas.model_validate({}))
    readiness: Readiness = Field(default_factory=lambda: Readiness.model_validate({}))
    restart: Restart = Field(default_factory=lambda: Restart.model_validate({}))
    scaling: Scaling = Field(default_factory=lambda: Scaling.model_validate({}))

    @field_validator("job")
    @classmethod
    def _service_owns(cls, job: JobIn) -> JobIn:
        for name in sorted(job.model_fields_set & _OWNED_JOB_FIELDS.keys()):
            raise field_error(_OWNED_JOB_FIELDS[name], getattr(job, name), name)
        return job

    @model_validator(mode="after")
    def _port_of_an_image(self) -> ServiceIn:
        if self.port is not None and self.job.image is None and self.job.model is None:
            why = (
                "a host process listens on $PORT, a port of its node the agent picks: leave it out"
            )
            raise field_error(why, self.port, "port")
        return self

    def replica_spec(self) -> dict[str, object]:
        """What a change of rolls the replicas: the job and its port (a change of the bounds,
        the probe or the scaling does not)."""
        return {"job": self.job.model_dump(mode="json", exclude_unset=True), "port": self.port}


class ServiceReplica(Lenient):
    """One replica: its job and what the controller knows of it."""

    job_id: int = Field(description="The replica's job (xpupool show ID).")
    name: str = Field(description="'<service>-<n>'.")
    generation: int = Field(description="The service's generation it runs.")
    state: JobState = Field(description="Its job's state.")
    ready: bool = Field(description="Its last probes passed: it gets requests.")
    draining: bool = Field(description="Taken away: gets no new requests, stopped once idle.")
    node: str | None = Field(None, description="Where it runs; null = not placed.")
    host: str | None = Field(None, description="The address it is probed and reached at.")
    port: int | None = Field(None, description="The host port it is reached at.")


class ServiceEvent(Lenient):
    at: float = Field(description="Unix time, seconds.")
    state: str
    reason: str


class Service(Lenient):
    name: str
    tenant: str
    state: ServiceState
    reason: str = Field(description="Why it is in this state.")
    url: str = Field(description="Its stable endpoint: the proxy's path on the server.")
    generation: int = Field(description="Moves by one with each change of job or port.")
    desired: int = Field(description="Replicas it aims at now (between min and max).")
    ready: int = Field(description="Ready replicas of the current generation and older.")
    min: int
    max: int
    port: int | None
    requests_per_s: float = Field(0.0, description="Answered over the last minute.")
    p99_ms: float | None = Field(None, description="Their p99 latency; null = no request.")
    spec: dict[str, Any] = Field(
        description="The service's body as last created or changed (the fields it gave): what "
        "a PUT changes."
    )
    replicas: list[ServiceReplica] = Field(default_factory=list)
    created_at: float
    updated_at: float
    events: list[ServiceEvent] = Field(default_factory=list)
