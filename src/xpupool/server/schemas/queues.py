"""Queues and their quotas (``/v1/queues``): what a queue may use by flavour and resource, the
cohort it borrows in, its preemption and placement settings, and what it uses now.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import Field, field_validator, model_validator

from xpupool.engine.cycle.admission import SITE_MARK
from xpupool.model.errors import RequestError
from xpupool.model.request import check_site_name
from xpupool.server.schemas.base import Lenient, Name, Strict


class QuotaResource(StrEnum):
    DEVICES = "devices"
    DEVICE_MEMORY_MIB = "device_memory_mib"
    CORES_PERMILLE = "cores_permille"


class QuotaIn(Strict):
    flavor: str = Field(
        min_length=1,
        max_length=63,
        description="Which devices: a vendor key ('nvidia'), a model or family the catalog knows "
        "('A100', '910B'), or '*' for any device; 'A100@beijing' holds the quota in one site only.",
    )
    resource: QuotaResource = Field(
        description="'devices' (count), 'device_memory_mib' (MiB) or 'cores_permille' "
        "(thousandths of a device's compute)."
    )
    nominal: int = Field(ge=0, le=1 << 50, description="Guaranteed amount.")
    borrowing_limit: int | None = Field(
        None,
        ge=0,
        le=1 << 50,
        description="Most this queue may borrow from its cohort on top of nominal; "
        "null = no limit, 0 = never borrow. Must be null when the queue has no cohort.",
    )

    @field_validator("flavor")
    @classmethod
    def _site_of_flavor(cls, flavor: str) -> str:
        kind, at, site = flavor.partition(SITE_MARK)
        if at:
            if not kind:
                raise ValueError(
                    f"{flavor!r}: give a flavour before '@' ('*@{site}' for any device)"
                )
            try:
                check_site_name("site", site)
            except RequestError as exc:
                raise ValueError(f"{flavor!r}: after '@' comes a site: {exc.reason}") from None
        return flavor


class UnlistedFlavors(StrEnum):
    ALLOW = "allow"
    DENY = "deny"


class QueuePreemption(StrEnum):
    LOWER_PRIORITY = "lower_priority"
    NEVER = "never"


class QueueIn(Strict):
    name: Name = Field(description="Queue name, unique across tenants.")
    tenant: Name = Field(description="The tenant that owns the queue.")
    quotas: list[QuotaIn] = Field(
        default_factory=list,
        max_length=64,
        description="Quotas by (flavor, resource). Flavours are tried in the order they first "
        "appear. Empty = no limit: any device, as much as fits.",
    )
    cohort: Name | None = Field(
        None, description="Queues in one cohort lend each other unused nominal quota; null = none."
    )
    max_priority: int = Field(
        0,
        ge=-(1 << 31),
        le=(1 << 31) - 1,
        description="Highest priority a job in this queue may ask for; above it a submission is "
        "403. Default 0 (the default priority): jobs may lower theirs, and only a cap the admin "
        "raises lets them preempt others' default-priority work.",
    )
    preemption: QueuePreemption = Field(
        QueuePreemption.LOWER_PRIORITY,
        description="'lower_priority': a job refused for room alone may stop running jobs of "
        "strictly lower priority (whole jobs, the fewest that make room); 'never': it waits.",
    )
    unlisted_flavors: UnlistedFlavors = Field(
        UnlistedFlavors.ALLOW,
        description="Devices none of the quotas' flavours names: 'allow' = usable without quota "
        "once the listed flavours are tried; 'deny' = not usable by this queue.",
    )
    allow_unfittable: bool = Field(
        False,
        description="Accept jobs that nothing in the pool could hold even empty (they wait, "
        "'unschedulable', for nodes that can); false = refuse them at submission (422).",
    )
    preempts_min_run: bool = Field(
        False,
        description="Its jobs may preempt jobs still inside their min_run (the request's "
        "min-run); false = such jobs are spared until their minimum run time has passed.",
    )
    network: Literal["bridge", "host"] | None = Field(
        None,
        description="The network its jobs' image replicas get where the node's agent allows it "
        "(xpupool agent --allow-network): host for NCCL and RDMA; null = the node's own.",
    )
    profile: Name | None = Field(
        None,
        description="Placement profile (a built-in such as xpupool or binpack, or one from the "
        "server's --profile file) for the queue's jobs that name none; null = the server's "
        "default profile. An unknown name is refused.",
    )

    @model_validator(mode="after")
    def _borrowing_needs_cohort(self) -> QueueIn:
        if self.cohort is None:
            for i, q in enumerate(self.quotas):
                if q.borrowing_limit not in (None, 0):
                    raise ValueError(
                        f"quotas[{i}].borrowing_limit must be null or 0 when cohort is null"
                    )
        seen: set[tuple[str, str]] = set()
        for i, q in enumerate(self.quotas):
            key = (q.flavor, q.resource.value)
            if key in seen:
                raise ValueError(f"quotas[{i}]: a second quota for {key[0]}/{key[1]}")
            seen.add(key)
        return self


class QuotaUsage(Lenient):
    flavor: str
    resource: QuotaResource
    nominal: int
    borrowing_limit: int | None
    used: int = Field(description="Charged by the queue's running allocations.")


class Queue(Lenient):
    name: str
    tenant: str
    cohort: str | None
    max_priority: int = Field(0, description="Highest priority its jobs may ask for.")
    preemption: QueuePreemption = QueuePreemption.LOWER_PRIORITY
    unlisted_flavors: UnlistedFlavors = UnlistedFlavors.ALLOW
    allow_unfittable: bool = False
    preempts_min_run: bool = False
    network: str | None = Field(None, description="Its image replicas' network; null: the node's.")
    profile: str | None = Field(
        None, description="Placement profile of its jobs that name none; null = the default."
    )
    quotas: list[QuotaUsage]
    pending: int = Field(0, description="Jobs waiting in this queue.")
    running: int = Field(0, description="Jobs holding devices (scheduled or running).")
