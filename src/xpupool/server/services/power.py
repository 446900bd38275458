"""The fleet's power-saving view (``server/power_saving.py``) as the API gives it."""

from __future__ import annotations

from xpupool.server.plane import ControlPlane
from xpupool.server.power_saving import PowerLook
from xpupool.server.schemas.power import (
    FleetPower,
    IdleNodeOut,
    ModelIdlePowerOut,
    SleepyCardOut,
)


def look(plane: ControlPlane) -> PowerLook:
    """One look over the pool now (under the plane's lock, as one state of it)."""
    now = plane.clock()
    return plane.read_columns(lambda st: plane.power_saving.look(st, now, plane.meter.power))


def idle_power(plane: ControlPlane) -> list[ModelIdlePowerOut]:
    """Each card model in the pool, its idle figure and where it comes from."""
    power, learned = plane.meter.power, plane.meter.idle
    models = plane.read_columns(lambda st: sorted({printed for _v, printed in st.models}))
    out = []
    for printed in models:
        source = power.idle_source(printed)
        found = learned.figures.get(learned.key(printed)) if source == "measured" else None
        out.append(
            ModelIdlePowerOut(
                model=printed,
                idle_watts=power.figures(printed).idle_watts,
                source=source,
                samples=0 if found is None else found[1],
            )
        )
    return out


def fleet_power(plane: ControlPlane) -> FleetPower:
    seen = look(plane)
    return FleetPower(
        generated_at=plane.clock(),
        power_down_after_s=plane.power_saving.power_down_after_s,
        could_sleep=[
            SleepyCardOut(uuid=c.uuid, node=c.node, model=c.model, idle_watts=c.idle_watts)
            for c in seen.cards
        ],
        could_sleep_watts=round(seen.idle_watts, 3),
        could_power_down=[IdleNodeOut(node=n.node, idle_since=n.idle_since) for n in seen.nodes],
        idle_power=idle_power(plane),
    )
