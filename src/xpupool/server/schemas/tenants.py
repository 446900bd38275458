"""Tenants and their tokens: the per-tenant limits on queued work and kept logs, with their
defaults, and the credentials the admin issues (``/v1/tenants``, ``/v1/tokens``).

Kept apart from queues and jobs: the store reads the limits' defaults for tenants from before them
(``storage/tenants.py``) without the job types.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from xpupool.server.schemas.base import Lenient, Name, Strict

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
