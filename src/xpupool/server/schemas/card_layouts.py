"""A partitioned card's layout and its re-cuts (``PUT``/``GET /v1/nodes/NODE/cards/UUID/layout``,
``xpupool node recut``; issue 53): what an admin asks and what the API shows."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from xpupool.server.schemas.base import Lenient, Strict

MAX_INSTANCES = 64  # a card holds 7 MIG instances or a few vNPUs at most; a bound, not a rule


class CardLayoutIn(Strict):
    """A re-cut: the instances the card should hold once its agent has cut it."""

    layout: list[Annotated[str, Field(max_length=60)]] = Field(
        min_length=1,
        max_length=MAX_INSTANCES,
        description="The wanted instances, as cluster files write them: '3g.40gb@0' (a MIG "
        "profile at its first memory slice), 'vir05_1c_16g' (an Ascend vNPU template). Checked "
        "against the card model's geometry (422 naming 'layout' and the reason).",
    )
    why: str = Field(
        "",
        max_length=300,
        description="Why, kept with the re-cut's event and audit row; empty: 'asked by the admin'.",
    )


class CardEventView(Lenient):
    at: float = Field(description="Unix time.")
    event: str = Field(description="'asked', 'applied' (the agent reported it cut so) or 'failed'.")
    detail: str


class CardLayoutView(Lenient):
    """A card of an agent node: how it is cut now and how it is wanted."""

    node: str
    card: str = Field(description="The card's UUID (its instances' partition_of).")
    model: str
    current: list[str] = Field(description="Its instances now, as the agent last reported them.")
    busy: list[str] = Field(
        default_factory=list,
        description="The instances of ``current`` that jobs hold now; the others are free.",
    )
    wanted: list[str] | None = Field(
        description="The layout asked and not applied yet; null: none."
    )
    why: str = Field("", description="Why it was asked; empty when nothing is wanted.")
    asked_at: float | None = Field(None, description="Unix time it was asked; null: none.")
    job: int | None = Field(
        None,
        description="The job the scheduling cycle asked the wanted layout for (it waits for it); "
        "null: asked by the admin, or nothing wanted.",
    )
    events: list[CardEventView] = Field(
        default_factory=list, description="Its latest re-cut events, newest first."
    )
    failures: int = Field(
        0,
        description="Its failed re-cuts in a row (the agent's vendor tool failed), since the last "
        "one applied or asked by the admin; 0: none.",
    )
    resting_until: float | None = Field(
        None,
        description="Unix time before which the scheduling cycle proposes no re-cut of this card "
        "(a rest after failed re-cuts: 60 s, doubling per failure in a row, at most 30 min; the "
        "admin's PUT ends it); null: none.",
    )
