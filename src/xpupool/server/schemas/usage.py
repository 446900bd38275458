"""Usage (``GET /v1/usage``, ``GET /v1/usage/export``): what tenants' replica runs held, summed
per time bucket and per the labels asked for (docs/usage.md)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from xpupool.server.schemas.base import Lenient

UsageStep = Literal["hour", "day", "month"]
UsageLabel = Literal["tenant", "queue", "site", "model"]


class UsageRow(Lenient):
    """One bucket's sums for one combination of the labels asked for (a label not asked for is
    null: summed over)."""

    start: float = Field(description="The bucket's start, Unix seconds (UTC).")
    tenant: str | None = Field(None, description="'pool': the unheld share of held cards' energy.")
    queue: str | None = None
    site: str | None = None
    model: str | None = Field(None, description="The card model as its probe names it.")
    device_seconds: float = Field(description="Card-seconds held, weighted by each share.")
    gib_seconds: float = Field(description="Device memory held, GiB-seconds.")
    compute_unit_seconds: float = Field(
        description="Card-seconds x share x the model's compute units (dense BF16 TFLOPS)."
    )
    energy_j: float = Field(description="Energy of the cards held, joules, split by share.")
    cost: float | None = Field(
        None,
        description="At the prices in force as the usage was used (GET /v1/prices/history), "
        "in the currency of the table in force now; null: no price table is set.",
    )


class UsageAnswer(Lenient):
    step: UsageStep
    by: list[UsageLabel]
    start: float = Field(alias="from", description="Unix seconds, the first bucket's start.")
    end: float = Field(alias="to", description="Unix seconds; buckets start before it.")
    rows: list[UsageRow]
    currency: str | None = Field(
        None, description="The price table's in force now; null: none is set."
    )
