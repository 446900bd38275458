"""Tenants' secrets and the admin's own, sealed (``server/secret_box.py``): the value is never
stored in clear."""

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

# The admin's own secrets: the plane's credentials (a Kubernetes site's kubeconfig: the sites
# file's ``kubeconfig_secret``), no tenant's, so no tenant can read, replace or delete them.
plane_secrets = Table(
    "plane_secrets",
    metadata,
    Column("name", String(63), primary_key=True),
    Column("key_id", String(16), nullable=False),
    Column("sealed", LargeBinary, nullable=False),
    Column("size", Integer, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
)
