"""Energy: among the cards a job may use, prefer those where it adds least power, so that work
consolidates on cards and nodes already awake and whole cards and nodes go idle (issue 55).

A card draws its sleep power when idle (its idle power where it has no low-power state), its idle
power plus ``(busy - idle) x share`` when holding work (``catalog/power.py``, the one power
model); a node with no work at all can be powered down (Slurm's power saving), its cards then
drawing nothing. So what a replica of share ``s`` adds on card ``d`` is

    awake card       (busy - idle) x s
    idle card        (idle - sleep) + (busy - idle) x s
    node asleep      + the sleep power of its cards (the node powered up again)

and, as energy is power x time, over its relative speed on the card's model (``Request.speeds``,
1 when it names none). "At equal or better expected completion": a job with speeds is scored only
on the cards where it runs fastest among those that fit; slower ones score 0 (it goes there only
when nothing else fits). Scores are ``100 x (least added power + 1 W) / (added power + 1 W)``
over the fitting nodes, so the best node scores 100. The figures are the power model's, in its
order (an operator's override, then the idle watts measured on the pool's own cards, then the
catalog's): the one the engine's front hands it (``Engine.power``: the plane's, with what it
learned, ``server/usage/idle_power.py``), else the catalog's; the profile's :class:`EnergyArgs`
over them (a simulator's stand-ins). A model with no figure counts as 0 W, so it is never avoided
for energy alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from xpupool.catalog.power import Override, PowerModel
from xpupool.engine.context import Context
from xpupool.engine.scorers.base import MAX_SCORE, PluginArgs, ScorerEnv
from xpupool.engine.scorers.throughput import relative_speeds
from xpupool.engine.state import ClusterState, FloatArray

WHOLE = 1000.0  # thousandths of a card


@dataclass(frozen=True, slots=True)
class EnergyArgs(PluginArgs):
    """Per-model figures over the catalog's (``catalog/power.py`` overrides) and the share of
    idle power a sleeping card draws (``sleep_fraction``: 1.0, the default, where a card has no
    low-power state that needs no reset)."""

    overrides: tuple[Override, ...] = ()
    sleep_fraction: float = 1.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.sleep_fraction <= 1.0:
            raise ValueError(f"sleep_fraction must be within 0..1, got {self.sleep_fraction}")


class Energy:
    name: ClassVar[str] = "energy"

    def __init__(self, env: ScorerEnv | None = None) -> None:
        args = env.args if env is not None and isinstance(env.args, EnergyArgs) else EnergyArgs()
        self.args = args
        self._given = env.power if env is not None else None  # the front's power model, now
        self._state: ClusterState | None = None
        self._from: PowerModel | None = None  # the front's model the watts were taken from
        self._watts: tuple[FloatArray, FloatArray, FloatArray] | None = None

    def _model_watts(self, state: ClusterState) -> tuple[FloatArray, FloatArray, FloatArray]:
        """``[n_models]`` idle, busy and sleep watts per model id of ``state``."""
        given = self._given() if self._given is not None else None
        if (
            state is not self._state
            or given is not self._from
            or self._watts is None
            or len(self._watts[0]) != len(state.models)
        ):
            base = given if given is not None else PowerModel(state.catalog)
            power = base.with_overrides(self.args.overrides)
            figures = [power.figures(printed) for _, printed in state.models]
            idle = np.asarray([f.idle_watts for f in figures], np.float64)
            busy = np.asarray([f.busy_watts for f in figures], np.float64)
            self._watts = (idle, busy, idle * self.args.sleep_fraction)
            self._state = state
            self._from = given
        return self._watts

    def score(self, ctx: Context) -> FloatArray | None:
        if ctx.dev_fit is None:
            return None
        candidates = ctx.candidates()
        if candidates.size == 0:
            return None
        state = ctx.state
        idle, busy, sleep = self._model_watts(state)
        if not busy.any():
            return None  # no figures at all: nothing to prefer
        model = np.maximum(state.dev_model, 0)
        share = min(ctx.need_core / WHOLE, 1.0) if ctx.need_core else 1.0
        awake = state.dev_usable & (state.dev_core_free < state.dev_core_commit)
        added = (busy - idle)[model] * share + np.where(awake, 0.0, (idle - sleep)[model])
        speed = relative_speeds(ctx.req.speeds, state) if ctx.req.speeds else None
        fit = ctx.dev_fit & (state.dev_model >= 0)
        if speed is not None:
            fastest = float(np.where(fit, speed[model], 0.0).max())
            fit = fit & (speed[model] >= fastest)
            added = added / np.maximum(speed[model], 1e-9)
        card = np.where(fit, added, np.inf)
        k = max(ctx.k, 1)
        per_node = np.sort(card, axis=1)[:, :k].sum(axis=1)
        node_up = awake.any(axis=1)
        wake = np.where(node_up, 0.0, np.where(state.dev_usable, sleep[model], 0.0).sum(axis=1))
        cost = per_node + wake
        best = float(cost[candidates].min())
        if not np.isfinite(best):
            return None
        result: FloatArray = np.where(np.isfinite(cost), MAX_SCORE * (best + 1.0) / (cost + 1.0), 0)
        return result
