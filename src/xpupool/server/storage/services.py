"""Services (``schemas/services.py``), their replicas' jobs and their events. A replica is an
ordinary job (``jobs``); ``service_replicas`` links it to its service and the generation it runs,
so that the controller finds its replicas again after a restart of the server."""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    Float,
    Index,
    Integer,
    String,
    Table,
    Text,
    UniqueConstraint,
)

from xpupool.server.storage.meta import metadata

services = Table(
    "services",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("tenant", String(63), nullable=False),
    Column("name", String(63), nullable=False),
    Column("spec", JSON, nullable=False),  # the ServiceIn as last created or changed
    Column("generation", Integer, nullable=False),  # moves with each change of job or port
    Column("state", String(16), nullable=False),
    Column("reason", Text, nullable=False),
    Column("desired", Integer, nullable=False),
    Column("started", Integer, nullable=False),  # replicas ever started: the next one's <n>
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    # the restart backoff (service_controller._Restarts), so that a restarted plane goes on with
    # a crash loop's wait: replicas ended since the last reset (the doubling's step), the Unix
    # time before which no replica is started (None: none waits), and what ended last
    Column("restart_step", Integer, nullable=False, server_default="0"),
    Column("restart_at", Float, nullable=True),
    Column("restart_why", Text, nullable=True),
    UniqueConstraint("tenant", "name", name="uq_services_tenant_name"),
)

service_replicas = Table(
    "service_replicas",
    metadata,
    Column("job_id", Integer, primary_key=True),
    Column("service_id", Integer, nullable=False),
    Column("ordinal", Integer, nullable=False),  # the <n> of '<service>-<n>'
    Column("generation", Integer, nullable=False),
    Column("draining", Boolean, nullable=False),  # taken away: stopped once idle
    Column("drain_since", Float, nullable=True),
    Index("ix_service_replicas_service", "service_id"),
)

service_events = Table(
    "service_events",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("service_id", Integer, nullable=False),
    Column("at", Float, nullable=False),
    Column("state", String(16), nullable=False),
    Column("reason", Text, nullable=False),
    Index("ix_service_events_service", "service_id"),
)
