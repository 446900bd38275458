"""Volumes the admin declares (``schemas/volumes.py``)."""

from __future__ import annotations

from sqlalchemy import JSON, BigInteger, Boolean, Column, Float, String, Table

from xpupool.server.storage.meta import metadata

volumes = Table(
    "volumes",
    metadata,
    Column("name", String(63), primary_key=True),
    Column("path", String(1024), nullable=False),
    Column("per_tenant", Boolean, nullable=False),
    Column("read_only", Boolean, nullable=False),
    Column("tenants", JSON, nullable=True),  # null: every tenant
    Column("queues", JSON, nullable=True),  # null: every queue
    Column("quota_bytes", BigInteger, nullable=True),  # reported when over, not enforced
    Column("created_at", Float, nullable=False),
)
