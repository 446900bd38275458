"""Per-service tokens: a secret a tenant hands to whoever calls one of its services (a web app, a
colleague's notebook) that reaches that service's proxy and nothing else. Stored as SHA-256
hashes, as the API's tokens are (``server/auth.py``)."""

from __future__ import annotations

from sqlalchemy import Boolean, Column, Float, ForeignKey, Index, Integer, String, Table

from xpupool.server.storage.meta import metadata

service_tokens = Table(
    "service_tokens",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("tenant", String(63), ForeignKey("tenants.name"), nullable=False),
    Column("service", String(63), nullable=False),
    Column("name", String(63), nullable=True),  # the tenant's label for it
    Column("hash", String(64), nullable=False, unique=True),
    Column("created_at", Float, nullable=False),
    Column("revoked", Boolean, nullable=False, default=False),
    Index("ix_service_tokens_service", "tenant", "service"),
)
