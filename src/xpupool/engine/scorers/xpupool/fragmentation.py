"""``fragmentation``: FGD's fragmentation delta (``engine/fragmentation/measure.py``) at a chosen
resolution, the policy's primary term.

    primary = (100 / steps) * floor(steps * sigmoid((F_before - F_after) / 1000))

per card for a one-card replica (``steps``, 50 by default), per node for others (``steps_node``,
100: FGD's own score). Half FGD's resolution makes fragmentation deltas within about 80 thousandths
of a GPU equal, so that near-equal nodes go to the engine's seeded node order and near-equal cards
to the other terms (the fullest card, the packing); replicas of several cards (or none) keep FGD's
resolution, where coarser scores measurably lost (``docs/placement-policy.md``). Already in 0..100
(0, 2, ..., 98 at half resolution): its weight in the built-in profiles is 1.

A replica of several cards is evaluated, and placed, on the first ``k`` cards that fit, as FGD does:
the scorer is a device picker for those.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from xpupool.engine.context import Context
from xpupool.engine.fragmentation.measure import IndexArray
from xpupool.engine.plugin_args import PluginArgs
from xpupool.engine.scorers.base import ScorerEnv
from xpupool.engine.scorers.fgd import first_fitting
from xpupool.engine.scorers.xpupool.plugin import WorkloadScorer
from xpupool.engine.state import FloatArray

STEPS = 50  # primary score levels for a one-device replica (FGD has 100)
STEPS_NODE = 100  # and for others, which have no card tie-break to decide near-ties: FGD's


@dataclass(frozen=True, slots=True)
class FragmentationArgs(PluginArgs):
    """Score levels for one-card replicas (``steps``) and for others (``steps_node``)."""

    steps: int = STEPS
    steps_node: int = STEPS_NODE

    def __post_init__(self) -> None:
        for name, value in (("steps", self.steps), ("steps_node", self.steps_node)):
            if value < 1:
                raise ValueError(f"{name} must be at least 1, got {value}")


class FragmentationDelta(WorkloadScorer):
    name: ClassVar[str] = "fragmentation"
    default_args: ClassVar[FragmentationArgs] = FragmentationArgs()

    def __init__(self, env: ScorerEnv) -> None:
        super().__init__(env)
        self.args = env.args if isinstance(env.args, FragmentationArgs) else self.default_args
        self.model.parts.append(self._describe)

    def _describe(self) -> str:
        steps = self.args.steps
        resolution = {50: "half resolution", 100: "FGD's resolution"}.get(steps, f"{steps} levels")
        return f"{resolution} for one-card replicas"

    def card_key(self, ctx: Context) -> Hashable:
        self.model.fragmentation(ctx)  # the shape table current before the amounts are read
        return (self.model.generation, self.model.after.amounts(ctx))

    def card_scores(self, ctx: Context, nodes: IndexArray) -> FloatArray:
        seen = self.model.fragmentation(ctx)
        return primary(seen.before[nodes, None], seen.after.frag_after[nodes], self.args.steps)

    def node_scores(self, ctx: Context, nodes: IndexArray) -> FloatArray:
        seen = self.model.fragmentation(ctx)
        return primary(seen.before[nodes], seen.after.frag_after[nodes], self.args.steps_node)

    def pick(self, ctx: Context, node: int) -> list[int] | None:
        """The first ``k`` fitting cards for a replica of several (where it was evaluated); a
        one-card replica goes to the card the profile's card scorers chose."""
        return first_fitting(ctx, node)


def primary(before: FloatArray, after: FloatArray, steps: int) -> FloatArray:
    """FGD's sigmoid of the fragmentation delta at ``steps`` levels, on FGD's 0..100 scale."""
    delta = np.minimum(np.maximum((before - after) / 1000.0, -50.0), 50.0)  # np.clip, cheaper
    result: FloatArray = np.floor(steps / (1.0 + np.exp(-delta))) * (100.0 / steps)
    return result
