"""Volumes the admin declares (``/v1/volumes``) and a job's mounts of them.

A volume is a directory on the nodes (its ``path``, the same on every node, or a pattern with
``{node}``), shared by the tenants it names or private to each of them (``per_tenant``: each
tenant gets ``PATH/<tenant>``, the tenant's uid's own). A job mounts it by name at a path of its
choosing; the agent binds it there (containers, bwrap) or gives the job its host path (host back
end: docs/agent.md).
"""

from __future__ import annotations

import posixpath

from pydantic import Field, field_validator

from xpupool.server.schemas.base import Lenient, Name, Strict

MAX_JOB_VOLUMES = 16
RESERVED_MOUNTS = ("/proc", "/sys", "/dev", "/run/secrets", "/tmp")
"""Where a job may not mount a volume (nor under): what the back ends set up themselves."""


def _absolute_clean(value: str, what: str) -> str:
    if not value.startswith("/"):
        raise ValueError(f"{what} must be an absolute path")
    if "\0" in value or any(part in (".", "..") for part in value.split("/")):
        raise ValueError(f"{what} must not hold '.' or '..' components")
    clean = posixpath.normpath(value)
    if clean != value.rstrip("/") and value != "/":
        raise ValueError(f"{what} must be written plainly (no '//'); say {clean!r}")
    return clean


class VolumeIn(Strict):
    """A volume as the admin declares it."""

    path: str = Field(
        max_length=1024,
        description="Absolute directory on the nodes; '{node}' is replaced by the node's name.",
    )
    per_tenant: bool = Field(
        False, description="Each tenant gets PATH/<tenant>, its own; else one directory shared."
    )
    read_only: bool = Field(False, description="Jobs mount it read-only whatever they ask.")
    tenants: list[Name] | None = Field(
        None, max_length=1000, description="Tenants that may mount it; null = every tenant."
    )
    queues: list[Name] | None = Field(
        None, max_length=1000, description="Queues whose jobs may mount it; null = every queue."
    )
    quota_bytes: int | None = Field(
        None,
        ge=0,
        le=1 << 62,
        description="Bytes a tenant's directory (per_tenant) or the volume may hold; reported "
        "when over (over_quota), not enforced: null = no quota.",
    )

    @field_validator("path")
    @classmethod
    def _path(cls, value: str) -> str:
        clean = _absolute_clean(value, "path")
        if clean == "/":
            raise ValueError("path must not be '/'")
        return clean


class VolumeUsage(Lenient):
    """What the volume holds on one node (for a tenant, per_tenant), as its agent last measured."""

    node: str
    tenant: str | None
    bytes: int
    complete: bool = Field(description="False: the measure stopped at its bound; at least.")
    at: float = Field(description="When the agent sent it (Unix time).")


class Volume(Lenient):
    name: Name
    path: str
    per_tenant: bool
    read_only: bool
    tenants: list[str] | None
    queues: list[str] | None
    quota_bytes: int | None = None
    created_at: float
    usage: list[VolumeUsage] = Field(
        default_factory=list, description="Per node (and tenant): the agents' last measures."
    )
    used_bytes: int | None = Field(None, description="Their sum; null: not measured yet.")
    over_quota: list[str] = Field(
        default_factory=list, description="Who holds more than quota_bytes: tenants, or 'all'."
    )


class VolumeMount(Strict):
    """A job's mount of a volume."""

    name: Name = Field(description="The volume (xpupool volume list).")
    path: str = Field(max_length=1024, description="Where the job sees it (absolute).")
    read_only: bool = Field(False, description="Mount it read-only.")

    @field_validator("path")
    @classmethod
    def _path(cls, value: str) -> str:
        clean = _absolute_clean(value, "path")
        if clean == "/":
            raise ValueError("a volume cannot be mounted at '/'")
        for reserved in RESERVED_MOUNTS:
            if clean == reserved or clean.startswith(reserved + "/"):
                raise ValueError(f"{reserved} is the back end's own; mount elsewhere")
        return clean
