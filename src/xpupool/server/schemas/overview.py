"""The fleet's overview and history (``GET /v1/fleet/overview``, ``GET /v1/fleet/history``):
capacity by site and model, what is allocated, busy and stranded, why jobs wait, and the series
kept over time (docs/fleet-overview.md).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from xpupool.server.schemas.base import Lenient


class OverviewGroup(Lenient):
    """The cards of one model in one site. ``*_used`` and ``power_w`` sum what agents reported in
    the last two minutes; null when no card of the group reported that value."""

    site: str
    vendor: str
    device_model: str = Field(
        description="The catalog's name of the model (as registered if unknown)."
    )
    devices_total: int
    devices_allocated: int = Field(description="Cards some job holds a share of.")
    devices_busy: int = Field(
        description="Cards whose reported utilisation is at least the overview's busy_util_pct."
    )
    devices_reporting: int = Field(description="Cards with a fresh utilisation reading.")
    memory_mib_total: int = Field(description="Device memory, physical, MiB.")
    memory_mib_allocated: int = Field(description="Device memory granted to jobs, MiB.")
    memory_mib_used: int | None = Field(description="Device memory in use as probes read it.")
    core_pct_total: float = Field(description="Compute, 100 per card.")
    core_pct_allocated: float = Field(description="Compute granted to jobs, 100 per whole card.")
    core_pct_used: float | None = Field(description="Sum of reported utilisation, 100 per card.")
    power_w: float | None = Field(description="Sum of reported board power, watts.")
    cordoned: int = Field(description="Cards cordoned, or on a cordoned node.")
    unhealthy: int = Field(description="Cards their agent or the registration says are unhealthy.")


class StrandedAt(Lenient):
    """Stranded capacity of one site."""

    memory_mib: int
    core_pct: float
    devices: int


class StrandedCapacity(Lenient):
    """Idle capacity no job shape can use now (engine/fragmentation/stranded.py): the pending
    jobs' shapes plus a fixed set of common ones (services/overview.py ``COMMON_SHAPES``)."""

    memory_mib: int = Field(description="Idle device memory on such cards, MiB.")
    core_pct: float = Field(description="Idle compute on such cards, 100 per card.")
    devices: int = Field(description="In-service cards holding some of it.")
    shapes: int = Field(description="Job shapes it was measured against.")
    by_site: dict[str, StrandedAt] = Field(default_factory=dict, description="The same per site.")


class OverviewDomain(Lenient):
    """One link domain of a site that names link domains (docs/sites.md): where a gang of that
    site is kept, with its nodes and cards (as ``GET /v1/sites``' ``domains``)."""

    site: str
    name: str | None = Field(
        description="The value of the site's link_domain_label; null: the site's nodes without it."
    )
    nodes: int
    devices_total: int
    devices_free: int = Field(description="Cards with nothing allocated on its schedulable nodes.")
    devices_allocated: int = Field(description="Cards some job holds a share of.")


class JobCounts(Lenient):
    pending: int = Field(description="Jobs waiting to be placed.")
    running: int = Field(description="Jobs whose processes run.")
    holding: int = Field(
        description="Jobs holding devices (admitted, scheduled, running, stopping)."
    )


class FleetOverview(Lenient):
    """``GET /v1/fleet/overview``. The fleet's numbers are everyone's; a tenant's
    ``pending_by_reason`` and ``jobs`` count only its own jobs (``scope`` says which)."""

    generated_at: float = Field(description="Unix time.")
    scope: Literal["fleet", "tenant"] = Field(
        description="'fleet': jobs of every tenant (admin); 'tenant': the caller's own jobs."
    )
    busy_util_pct: float = Field(description="Utilisation from which a card counts as busy.")
    groups: list[OverviewGroup]
    stranded: StrandedCapacity
    pending_by_reason: dict[str, int] = Field(
        description="Pending jobs by why they wait: the engine's reason rejecting the most nodes "
        "(among capacity reasons when there are any), or, where the engine finds room now, a "
        "waiting state (services/overview.py ``Waiting``)."
    )
    jobs: JobCounts
    domains: list[OverviewDomain] = Field(
        default_factory=list,
        description="The link domains of each site that names some (by site, then name, the "
        "unnamed one last); empty when no node has a domain.",
    )


class HistorySeries(Lenient):
    name: str = Field(description="What is measured (docs/fleet-overview.md lists the names).")
    site: str | None = Field(description="The site; null: every site.")
    model: str | None = Field(description="The device model; null: every model.")
    points: list[tuple[float, float]] = Field(
        description="[Unix time, value] oldest first; a sample where the value was unknown is left out."
    )


class History(Lenient):
    """``GET /v1/fleet/history``."""

    window: Literal["1h", "1d", "1w"]
    step_s: float = Field(description="Seconds between two points (the tier read).")
    series: list[HistorySeries]
