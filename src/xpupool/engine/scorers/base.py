"""A scorer rates every node for one replica: ``[N]`` floats in 0..MAX_SCORE, higher is better.

Scores are computed for all nodes at once; the engine ignores nodes that did not pass the filters.
Weights live in profiles (``engine/profile.py``), never in scorers, and mean something only because
every scorer's scores share one range, as kube's MinNodeScore..MaxNodeScore: a scorer whose own
measure leaves it maps it back with a strictly increasing function (:func:`squash`), which keeps
every choice it makes alone (same order, same ties).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Protocol, runtime_checkable

import numpy as np

from xpupool.engine.context import Context
from xpupool.engine.eligibility import Eligibility
from xpupool.engine.fragmentation.measure import TargetWorkload
from xpupool.engine.plugin_args import PluginArgs
from xpupool.engine.state import FloatArray, IntArray
from xpupool.model.request import Request

__all__ = [
    "MAX_SCORE",
    "MIN_SCORE",
    "Describing",
    "DevicePicker",
    "Observer",
    "PluginArgs",
    "PostScorer",
    "Scorer",
    "ScorerEnv",
    "squash",
]

MIN_SCORE = 0.0
MAX_SCORE = 100.0


def squash(raw: FloatArray, middle: float, scale: float) -> FloatArray:
    """``raw`` mapped into (MIN_SCORE, MAX_SCORE) by a logistic centred on ``middle``: strictly
    increasing, so equal raw scores stay equal and the order of unequal ones is kept (in float64
    down to differences about 1e-14 of the score, far below any a scorer makes on purpose)."""
    z = np.clip((raw - middle) / scale, -700.0, 700.0)  # exp stays finite and positive
    result: FloatArray = MAX_SCORE / (1.0 + np.exp(-z))
    return result


@dataclass(frozen=True, slots=True)
class ScorerEnv:
    """What a scorer may depend on besides the request: the engine's seed, its pipeline (for
    cached eligibility), the target workload when the front knows one (FGD needs it), and the
    profile's arguments for the plugin (None: its defaults)."""

    seed: int
    pipeline: Eligibility
    workload: TargetWorkload | None = None
    args: PluginArgs | None = None


class Scorer(Protocol):
    name: ClassVar[str]

    def score(self, ctx: Context) -> FloatArray:
        """``[N]`` in MIN_SCORE..MAX_SCORE on the nodes in ``ctx.node_fit``; others are ignored."""
        ...


@runtime_checkable
class DevicePicker(Protocol):
    """A scorer that rates a node by a particular choice of devices also makes that choice.

    ``pick`` returns the columns to use on ``node`` (the one chosen), or None to leave the choice to
    the profile's device policy. The engine asks the profile's heaviest scorer, when it is one.
    """

    def pick(self, ctx: Context, node: int) -> list[int] | None: ...


@runtime_checkable
class PostScorer(Protocol):
    """A scorer with a declared post-score step: once the weighted sum of a replica's scores is
    known, it may choose the node itself (xpupool's lookahead among the near-best), from what it
    kept in ``ctx.cycle``; None leaves the choice to the sum. Runs only when two or more nodes fit
    and in the order of the profile's scorers; the first that chooses decides."""

    def post_score(self, ctx: Context, candidates: IntArray, total: FloatArray) -> int | None: ...


@runtime_checkable
class Observer(Protocol):
    """A scorer that learns from the workload is told of every request the engine was asked to
    place, placed or refused (``placed``: every replica placed). Scoring alone would not tell it:
    the engine scores only when two or more nodes fit, so refused requests never reach ``score``."""

    def observe(self, req: Request, placed: bool) -> None: ...


@runtime_checkable
class Describing(Protocol):
    """A scorer that chooses something for itself (xpupool: its score resolution) says what and why,
    for reports (``Engine.notes``)."""

    def describe(self) -> str: ...
