"""Prices and budgets (``PUT /v1/prices``, ``PUT /v1/tenants/{t}/budget``): what usage costs and
what each tenant may spend per period (docs/usage.md, "Prices and budgets")."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from xpupool.server.schemas.base import Lenient, Strict

Price = Annotated[float, Field(ge=0, le=1e9, description="Currency units; 0 = free. Default 0.")]
BudgetPeriod = Literal["day", "week", "month"]
BudgetPolicy = Literal["warn", "lower-priority", "refuse"]


class ModelPrice(Strict):
    model: str = Field(
        min_length=1,
        max_length=200,
        description="A card model: a catalog name or alias, or the name its probe prints.",
    )
    per_card_hour: Price = Field(description="Price of one card-hour of the model (by share).")


class PriceTable(Strict):
    """What usage costs: cost = card-hours x the model's price + compute-unit-hours x
    ``per_compute_unit_hour`` + kWh x ``per_kwh`` (each term 0 where no price is given)."""

    currency: str = Field(
        "", max_length=10, description="A label shown with costs (EUR, USD, credits); empty."
    )
    per_compute_unit_hour: Price = 0.0
    per_kwh: Price = 0.0
    models: list[ModelPrice] = Field(
        default_factory=list, max_length=1000, description="Per-card-hour prices by model."
    )


class PriceAnswer(Lenient):
    currency: str = ""
    per_compute_unit_hour: float = 0.0
    per_kwh: float = 0.0
    models: list[ModelPrice] = Field(default_factory=list)
    effective_at: float | None = Field(
        None, description="Unix seconds: in force from then until the next table's; null: none."
    )
    updated_at: float | None = Field(None, description="Unix seconds; null: never set.")


class PriceHistory(Lenient):
    tables: list[PriceAnswer] = Field(
        default_factory=list,
        description="Every price table, in the order they take effect (those to come included).",
    )


class BudgetIn(Strict):
    period: BudgetPeriod = Field(
        description="The UTC period spend is counted over: a day, a week from Monday, or a "
        "calendar month."
    )
    amount: float = Field(
        ge=0, le=1e12, description="Most the tenant may spend per period, price table currency."
    )
    policy: BudgetPolicy = Field(
        description="Once spend reaches amount: 'warn' admits new jobs with an event and a "
        "metric; 'lower-priority' admits them at lowered_priority at most; 'refuse' refuses "
        "them (403) until the next period."
    )
    lowered_priority: int = Field(
        -1,
        ge=-(1 << 31),
        le=(1 << 31) - 1,
        description="lower-priority only: the highest priority a new job of the tenant gets once "
        "the budget is spent. Default -1 (below the default priority 0).",
    )

    @model_validator(mode="after")
    def _lowered_only_for_its_policy(self) -> BudgetIn:
        if "lowered_priority" in self.model_fields_set and self.policy != "lower-priority":
            raise ValueError("lowered_priority is for policy 'lower-priority' only")
        return self


class Budget(Lenient):
    tenant: str
    period: BudgetPeriod
    amount: float
    policy: BudgetPolicy
    lowered_priority: int
    currency: str = ""
    period_start: float = Field(description="The current period's start, Unix seconds (UTC).")
    period_end: float = Field(description="The next period's start, Unix seconds (UTC).")
    spent: float = Field(
        description="Cost of the tenant's usage in the current period at the prices in force "
        "as it was used, as of the last usage flush (docs/usage.md)."
    )
    exceeded: bool = Field(description="spent has reached amount: the policy applies now.")
