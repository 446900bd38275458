"""Devices (``/v1/devices``, ``/v1/accelerators``): a card as the API shows it, who holds what of
it and its recent readings, and the accelerator models a request may name.

A card's live readings are those its agent reports
(:class:`~xpupool.server.schemas.agent_protocol.DeviceMetrics`).
"""

from __future__ import annotations

from pydantic import Field

from xpupool.server.schemas.agent_protocol import DeviceMetrics
from xpupool.server.schemas.base import Lenient


class Device(Lenient):
    uuid: str
    node: str
    site: str
    index: int
    vendor: str
    model: str
    canonical_model: str | None
    memory_mib: int
    driver_version: str | None
    runtimes: dict[str, str]
    link_group: str | None
    healthy: bool
    health: str = Field(
        "healthy",
        description="'healthy', 'warning' (a cause its agent's operator keeps as a warning: the "
        "card serves on) or 'unhealthy' (cordoned, its jobs stopped and requeued by their "
        "on_node_lost policy, until it reads healthy for the settle period or the admin "
        "uncordons it).",
    )
    health_cause: str | None = Field(
        None, description="Why it is unhealthy or warned, its kind first ('xid-79: ...')."
    )
    cordoned: bool
    draining: bool = Field(
        False,
        description="Gone from (or changed in) its node's last registration while allocations "
        "held it: cordoned, and dropped or changed when they end.",
    )
    allocated_memory_mib: int = Field(description="Device memory granted to jobs (committed), MiB.")
    allocated_core_permille: int = Field(
        description="Compute granted to jobs (committed), thousandths of the card."
    )
    committable_memory_mib: int = Field(
        0,
        description="The most device memory that may be granted: memory_mib times the card's "
        "memory over-commit factor, rounded down (memory_mib when there is none).",
    )
    committable_core_permille: int = Field(
        1000,
        description="The most compute that may be granted, thousandths of the card: 1000 times "
        "its cores over-commit factor, rounded down.",
    )
    jobs: list[int] = Field(
        default_factory=list,
        description="Jobs holding a share of it that the caller may see: every job for the "
        "admin, a tenant's own jobs for a tenant.",
    )
    in_use_by_others: bool = Field(
        False,
        description="Jobs not in ``jobs`` hold a share of it too: another tenant's, shown to a "
        "tenant as anonymous use (docs/security.md). Always false for the admin.",
    )
    metrics: DeviceMetrics | None = None
    partition: str | None = Field(
        None,
        description="The hardware partition profile this device is ('3g.40gb', a MIG instance; "
        "'vir05_1c_16g', an Ascend vNPU), taken whole by one job; null: a card. A card's layout "
        "is the devices whose partition_of is its UUID; an instance is free when no job holds "
        "it (allocated_core_permille 0).",
    )
    partition_of: str | None = Field(None, description="The UUID of the card it was cut from.")
    partition_start: int | None = Field(
        None, description="MIG: the first memory slice it occupies on its card; null for vNPU."
    )


class DeviceShareHeld(Lenient):
    """What one replica of a job holds of a card."""

    job: int
    replica: int
    memory_mib: int = Field(description="Device memory granted, MiB.")
    core_permille: int = Field(
        description="Compute granted, thousandths of the card (0: shared best-effort)."
    )


class DeviceSample(Lenient):
    """One of a card's recent readings (its agent's heartbeat); null: the probe cannot read it."""

    t: float = Field(description="Unix time the server received the reading.")
    util_pct: float | None = None
    memory_mib_used: float | None = None
    power_w: float | None = None
    temp_c: float | None = None


class DeviceDetail(Device):
    """``GET /v1/devices/{uuid}``: the card, who holds what of it, and its recent readings."""

    shares: list[DeviceShareHeld] = Field(
        default_factory=list,
        description="Every replica holding a share of the card, of the jobs in ``jobs``: a "
        "tenant sees its own jobs' shares only.",
    )
    recent: list[DeviceSample] = Field(
        default_factory=list,
        description="The card's last readings, oldest first: at most 30, one per 10 s at most "
        "(server/live_metrics.py); empty when its agent never reported any.",
    )


class Accelerator(Lenient):
    """An accelerator model a request may name: a catalog model, or a model a device of the pool
    prints that the catalog lacks (``in_catalog`` false)."""

    vendor: str = Field(description="Vendor key ('nvidia', 'huawei').")
    model: str = Field(description="Canonical catalog name, or the name the device prints.")
    family: str | None = Field(
        description="The name that selects every model of the line ('A100'); null off-catalog."
    )
    memory_gib: float | None = Field(
        description="Memory per card as marketed (binary GiB); null for a model off the catalog."
    )
    aliases: list[str] = Field(description="Other names the vendor tools print for it.")
    in_catalog: bool
    in_pool: int | None = Field(
        description="Devices of this model registered in the pool (cordoned and lost nodes "
        "included); null when listed without a server."
    )
