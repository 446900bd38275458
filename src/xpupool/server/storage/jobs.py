"""Jobs, their state-transition events and the allocations the engine made for them.

An allocation row is written in the same transaction as the job's move to ``scheduled``, and deleted
in the same transaction as the move out of a holding state, so after any crash the rows are exactly
what the engine must restore: no device is allocated twice and none is leaked.
"""

from __future__ import annotations

from sqlalchemy import JSON, Boolean, Column, Float, ForeignKey, Index, Integer, String, Table, Text

from xpupool.server.storage.meta import metadata

jobs = Table(
    "jobs",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("name", String(200), nullable=False),
    Column("tenant", String(63), ForeignKey("tenants.name"), nullable=False),
    Column("queue", String(63), ForeignKey("queues.name"), nullable=False),
    Column("state", String(16), nullable=False),
    Column("reason", Text, nullable=False, default=""),
    Column("priority", Integer, nullable=False, default=0),
    Column("request", JSON, nullable=False),  # request_to_dict(Request)
    Column("command", JSON, nullable=False),
    Column("image", String(500), nullable=True),
    Column("pull", String(16), nullable=True),  # the image's pull policy; null: if-not-present
    Column("env", JSON, nullable=False),
    Column("secrets", JSON, nullable=True),  # [{"name", "env"}]: names only (schemas SecretRef)
    Column("volumes", JSON, nullable=True),  # [{"name", "path", "read_only"}] (VolumeMount)
    Column("pull_secret", String(63), nullable=True),  # the secret the image is pulled with
    Column("port", Integer, nullable=True),  # the port its process listens on (JobIn.port)
    Column("on_node_lost", String(10), nullable=False),
    Column("flavor", String(63), nullable=True),
    Column("exit_code", Integer, nullable=True),
    Column("attempts", Integer, nullable=False, default=0),  # runs started
    # the lifecycle (server/job_lifecycle.py): why its replicas are stopped, retries used, limits
    Column("stop_cause", String(16), nullable=True),
    Column("retries", Integer, nullable=False, default=0, server_default="0"),
    Column("max_retries", Integer, nullable=True),
    Column("retry_on", JSON, nullable=True),  # null = the default causes
    Column("backoff_s", Float, nullable=True),
    Column("backoff_max_s", Float, nullable=True),
    Column("max_runtime_s", Float, nullable=True),
    Column("not_before", Float, nullable=True),  # a pending retry waits until then
    Column("started_at", Float, nullable=True),  # the current run's start (max_runtime_s)
    # the current run's last checkpoint (Unix time), so that a restarted plane's preemption
    # planner still knows what a job would lose (server/job_checkpoints.py)
    Column("checkpoint_at", Float, nullable=True),
    # the site the plane dispatched it to (engine/cycle/dispatch.py); null: none chosen (the
    # request's own sites, kept apart in ``request``, are what the user allowed)
    Column("site", String(63), nullable=True),
    Column("on_site_lost", String(10), nullable=True),  # null: 'wait' (JobIn.on_site_lost)
    Column("reservation", String(63), nullable=True),  # the reservation it runs in (JobIn)
    Column("preemptible", Boolean, nullable=True),  # may borrow reserved cards (JobIn)
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    Index("ix_jobs_state", "state"),
    Index("ix_jobs_tenant_state", "tenant", "state"),
)

job_events = Table(
    "job_events",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("job_id", Integer, ForeignKey("jobs.id"), nullable=False, index=True),
    Column("at", Float, nullable=False),
    Column("state", String(16), nullable=False),
    Column("reason", Text, nullable=False),
)

allocations = Table(
    "allocations",
    metadata,
    Column("id", Integer, primary_key=True),  # the engine's allocation id
    Column("job_id", Integer, ForeignKey("jobs.id"), nullable=False, index=True),
    Column("replica", Integer, nullable=False),
    Column("node", String(63), nullable=False, index=True),
    Column("queue", String(63), nullable=False),
    Column("flavor", String(63), nullable=False),
    Column("data", JSON, nullable=False),  # the Allocation, field by field
)
