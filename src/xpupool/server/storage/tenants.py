"""Tenants, their API tokens (stored as SHA-256 hashes, never in clear) and their queues."""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    Connection,
    Float,
    ForeignKey,
    Integer,
    String,
    Table,
    func,
    select,
    text,
    update,
)

from xpupool.server.schemas.tenants import (
    DEFAULT_MAX_JOB_LOG_MIB,
    DEFAULT_MAX_LOG_MIB,
    DEFAULT_MAX_PENDING_JOBS,
    DEFAULT_MAX_PENDING_REPLICAS,
    DEFAULT_MAX_REPLICAS_PER_JOB,
)
from xpupool.server.storage.meta import metadata


def _default(value: int) -> Any:
    """A server-side default, so rows from an older release get it when the column is added."""
    return text(str(value))


tenants = Table(
    "tenants",
    metadata,
    Column("name", String(63), primary_key=True),
    Column("weight", Float, nullable=False, default=1.0),
    Column("created_at", Float, nullable=False),
    # stable per tenant, never reused: a root agent runs the tenant's jobs as uid first+index
    # (--job-uid-range); NULL only in a database from before it existed, until the next start
    Column("uid_index", Integer, nullable=True),
    # limits on queued work (schemas/tenants.py TenantIn); tenants from before them get the defaults
    Column(
        "max_pending_jobs",
        Integer,
        nullable=False,
        server_default=_default(DEFAULT_MAX_PENDING_JOBS),
    ),
    Column(
        "max_replicas_per_job",
        Integer,
        nullable=False,
        server_default=_default(DEFAULT_MAX_REPLICAS_PER_JOB),
    ),
    Column(
        "max_pending_replicas",
        Integer,
        nullable=False,
        server_default=_default(DEFAULT_MAX_PENDING_REPLICAS),
    ),
    # limits on the job logs the server keeps (server/job_logs.py), MiB
    Column(
        "max_job_log_mib",
        Integer,
        nullable=False,
        server_default=_default(DEFAULT_MAX_JOB_LOG_MIB),
    ),
    Column(
        "max_log_mib",
        Integer,
        nullable=False,
        server_default=_default(DEFAULT_MAX_LOG_MIB),
    ),
)

tokens = Table(
    "tokens",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("tenant", String(63), ForeignKey("tenants.name"), nullable=True),
    Column("role", String(10), nullable=False),  # admin | tenant | agent | bootstrap | metrics
    Column("name", String(100), nullable=False, default=""),
    Column("hash", String(64), nullable=False, unique=True),
    Column("created_at", Float, nullable=False),
    Column("revoked", Boolean, nullable=False, default=False),
    # agent: the node it speaks for (NULL: bound at first use, as tokens from before node
    # binding are); bootstrap: the node it registered once spent, or the only name it may register
    Column("node", String(63), nullable=True),
    Column("expires_at", Float, nullable=True),  # Unix time; NULL = never
)

queues = Table(
    "queues",
    metadata,
    Column("name", String(63), primary_key=True),
    Column("tenant", String(63), ForeignKey("tenants.name"), nullable=False),
    Column("cohort", String(63), nullable=True),
    Column("quotas", JSON, nullable=False),  # [QuotaIn as dict]
    Column("created_at", Float, nullable=False),
    # highest priority a job may ask for; queues from before the cap get 0 (the default priority)
    Column("max_priority", Integer, nullable=False, server_default=_default(0)),
    # may its jobs preempt lower-priority work ('lower_priority', 'never'); NULL = lower_priority
    Column("preemption", String(20), nullable=True),
    # devices no quota names: 'allow' (usable without quota) or 'deny'; NULL = allow
    Column("unlisted_flavors", String(10), nullable=True),
    # keep jobs nothing in the pool could hold (1) or refuse them at submission (0, NULL)
    Column("allow_unfittable", Integer, nullable=True),
    # may its jobs preempt jobs inside their min_run (1); NULL, 0 = no
    Column("preempts_min_run", Integer, nullable=True),
    # placement profile of the queue's jobs that name none; NULL = the server's default
    Column("profile", String(63), nullable=True),
    # the network of its jobs' image replicas (bridge, host) where the node allows; NULL = node's
    Column("network", String(8), nullable=True),
)


def assign_tenant_indices(conn: Connection) -> dict[str, int]:
    """Give every tenant without one the next unused index (in creation order, so an upgraded
    database numbers its tenants as if they had always had one); returns all of them."""
    top = conn.execute(select(func.max(tenants.c.uid_index))).scalar()
    nxt = -1 if top is None else int(top)
    missing = conn.execute(
        select(tenants.c.name)
        .where(tenants.c.uid_index.is_(None))
        .order_by(tenants.c.created_at, tenants.c.name)
    ).scalars()
    for name in list(missing):
        nxt += 1
        conn.execute(update(tenants).where(tenants.c.name == name).values(uid_index=nxt))
    return {r.name: r.uid_index for r in conn.execute(select(tenants.c.name, tenants.c.uid_index))}
