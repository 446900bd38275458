"""Tenants' secrets, sealed (``server/secret_box.py``): the value is never stored in clear."""

from __future__ import annotations

from sqlalchemy import Column, Float, ForeignKey, Integer, LargeBinary, String, Table

from xpupool.server.storage.meta import metadata

secrets = Table(
    "secrets",
    metadata,
    Column("tenant", String(63), ForeignKey("tenants.name"), primary_key=True),
    Column("name", String(63), primary_key=True),
    Column("key_id", String(16), nullable=False),  # the key that sealed it (secret_box.key_id)
    Column("sealed", LargeBinary, nullable=False),
    Column("size", Integer, nullable=False),  # bytes of the value, shown in listings
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
)
