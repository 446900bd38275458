"""``GET /v1/fleet/power``: cards that could sleep and nodes that could be powered down (issue
55; ``server/power_saving.py`` says when each counts). Reported only: nothing is changed."""

from __future__ import annotations

from pydantic import Field

from xpupool.catalog.power import IdleSource
from xpupool.server.schemas.base import Lenient


class SleepyCardOut(Lenient):
    uuid: str
    node: str
    model: str
    idle_watts: float = Field(description="What it draws idle (0: no idle figure known), W.")


class ModelIdlePowerOut(Lenient):
    model: str = Field(description="The card model as its probe names it.")
    idle_watts: float = Field(description="The idle figure energy is counted with, W.")
    source: IdleSource = Field(
        description="Where it comes from: the operator's catalog file, the pool's own cards' "
        "readings while idle (docs/usage.md), the packaged catalog's stand-in, or none (0 W)."
    )
    samples: int = Field(0, description="Readings a measured figure was taken over; else 0.")


class IdleNodeOut(Lenient):
    node: str
    idle_since: float = Field(description="Unix time a look first found it idle.")


class FleetPower(Lenient):
    generated_at: float = Field(description="Unix time.")
    power_down_after_s: float = Field(description="How long a node must be idle to be listed.")
    could_sleep: list[SleepyCardOut] = Field(
        description="Usable cards holding nothing: a low-power state could save their idle power."
    )
    could_sleep_watts: float = Field(description="Their idle power together, W.")
    could_power_down: list[IdleNodeOut] = Field(
        description="Nodes nothing has held for at least power_down_after_s."
    )
    idle_power: list[ModelIdlePowerOut] = Field(
        default_factory=list, description="Per card model in the pool: its idle figure's source."
    )
