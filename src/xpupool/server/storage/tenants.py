"""Tenants, their API tokens (stored as SHA-256 hashes, never in clear) and their queues."""

from __future__ import annotations

from sqlalchemy import JSON, Boolean, Column, Float, ForeignKey, Integer, String, Table

from xpupool.server.storage.meta import metadata

tenants = Table(
    "tenants",
    metadata,
    Column("name", String(63), primary_key=True),
    Column("weight", Float, nullable=False, default=1.0),
    Column("created_at", Float, nullable=False),
)

tokens = Table(
    "tokens",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("tenant", String(63), ForeignKey("tenants.name"), nullable=True),
    Column("role", String(10), nullable=False),  # admin | tenant | agent
    Column("name", String(100), nullable=False, default=""),
    Column("hash", String(64), nullable=False, unique=True),
    Column("created_at", Float, nullable=False),
    Column("revoked", Boolean, nullable=False, default=False),
)

queues = Table(
    "queues",
    metadata,
    Column("name", String(63), primary_key=True),
    Column("tenant", String(63), ForeignKey("tenants.name"), nullable=False),
    Column("cohort", String(63), nullable=True),
    Column("quotas", JSON, nullable=False),  # [QuotaIn as dict]
    Column("created_at", Float, nullable=False),
)
