"""A scorer rates every node for one replica: ``[N]`` floats in 0..MAX_SCORE, higher is better.

Scores are computed for all nodes at once; the engine ignores nodes that did not pass the filters.
Weights live in profiles (``engine/profile.py``), never in scorers, and mean something only because
every scorer's scores share one range, as kube's MinNodeScore..MaxNodeScore: a scorer whose own
measure leaves it maps it back with a strictly increasing function, which keeps every choice it
makes alone (same order, same ties). xpupool's scorers use affine maps whose scales the built-in
profiles' weights undo (``scorers/xpupool/``).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import ClassVar, Protocol, runtime_checkable

from xpupool.catalog.power import PowerModel
from xpupool.engine.context import Context
from xpupool.engine.eligibility import Eligibility
from xpupool.engine.fragmentation.measure import IndexArray, TargetWorkload
from xpupool.engine.fragmentation.workload_model import WorkloadModel
from xpupool.engine.plugin_args import PluginArgs
from xpupool.engine.state import FloatArray, IntArray
from xpupool.model.request import Request

__all__ = [
    "MAX_SCORE",
    "MIN_SCORE",
    "CardScorer",
    "Describing",
    "DevicePicker",
    "Observer",
    "PluginArgs",
    "PostScorer",
    "Scorer",
    "ScorerEnv",
]

MIN_SCORE = 0.0
MAX_SCORE = 100.0


@dataclass(frozen=True, slots=True)
class ScorerEnv:
    """What a scorer may depend on besides the request: the engine's seed, its pipeline (for
    cached eligibility), the target workload when the front knows one (FGD needs it), the
    profile's arguments for the plugin (None: its defaults), ``model``, which gives the
    engine's shared :class:`WorkloadModel` for the profile (made on first call, then the same
    object for every plugin that asks: kube's framework handle), and ``power``, which gives the
    power model the engine's front handed it now (``Engine.power``: the operator's figures and
    the idle watts measured on the pool; None: the catalog's)."""

    seed: int
    pipeline: Eligibility
    workload: TargetWorkload | None = None
    args: PluginArgs | None = None
    model: Callable[[], WorkloadModel] | None = None
    power: Callable[[], PowerModel | None] | None = None


class Scorer(Protocol):
    name: ClassVar[str]

    def score(self, ctx: Context) -> FloatArray | None:
        """``[N]`` in MIN_SCORE..MAX_SCORE on the nodes in ``ctx.node_fit``; others are ignored.
        None when the scorer rates every node alike for this request (kube's PreScore Skip: a
        topology scorer and a one-card replica): the sum is formed without it."""
        ...


@runtime_checkable
class CandidateScorer(Protocol):
    """A scorer that can score the candidates alone: ``score_on(ctx, nodes)`` is ``score(ctx)``
    at ``nodes`` (``[len(nodes)]``, the same values), without an ``[N]`` array over the fleet
    (the pipeline's weighted sum is formed over the candidates)."""

    def score_on(self, ctx: Context, nodes: IndexArray) -> FloatArray | None: ...


@runtime_checkable
class CardScorer(Protocol):
    """A scorer that rates each card for a one-card replica. The pipeline sums the profile's
    weighted card scores per card, takes per node its best fitting card (the lowest column among
    equals), adds the other scorers' weighted node scores, and the engine places the replica on
    the card that won (``card_scores.py``).

    ``card_scores(ctx, nodes)``: ``[len(nodes), W]`` in MIN_SCORE..MAX_SCORE for the cards of
    ``nodes`` (values on cards the replica does not fit are ignored), or None to rate whole nodes
    for this request (``score``). ``card_key(ctx)``: None when the scores depend on more than each
    node's own state (they are asked for every request); else a key such that, for equal keys, a
    node's card scores depend only on its state, so the pipeline keeps them and asks again only
    for nodes whose version moved (and then ``card_scores`` must not return None)."""

    def card_scores(self, ctx: Context, nodes: IndexArray) -> FloatArray | None: ...

    def card_key(self, ctx: Context) -> Hashable | None: ...


@runtime_checkable
class DevicePicker(Protocol):
    """A scorer that rates a node by a particular choice of devices also makes that choice.

    ``pick`` returns the columns to use on ``node`` (the one chosen), or None to leave the choice to
    the profile's device policy. Unless the request names a device policy, the engine places a
    one-card replica on the card its profile's card scorers chose (:class:`CardScorer`), else asks
    the heaviest of the profile's scorers that pick devices (the first among equal weights).
    """

    def pick(self, ctx: Context, node: int) -> list[int] | None: ...


@runtime_checkable
class Preference(Protocol):
    """A scorer for something a request may ask for (a preferred site). The engine adds it to the
    sum only when ``wanted`` says the request asks, and then skips the post-score steps, whose own
    choice would not know of the preference; a request that does not ask is scored by the
    profile's other scorers alone, exactly as if the profile had no preference scorer. Never the
    profile's device picker."""

    def wanted(self, req: Request) -> bool: ...


@runtime_checkable
class PostScorer(Protocol):
    """A declared post-score step: once the weighted sum of a replica's scores is known, it may
    choose the node itself (xpupool's lookahead among the near-best), from what the scorers kept
    in ``ctx.cycle``; None leaves the choice to the sum. A profile lists its post-score plugins
    (``Profile.post``); a scorer may also be one. Runs only when two or more nodes fit, the
    profile's scorers first, then its post-score plugins, in order; the first that chooses
    decides."""

    def post_score(self, ctx: Context, candidates: IntArray, total: FloatArray) -> int | None: ...


@runtime_checkable
class Observer(Protocol):
    """What learns from the workload (a scorer, or the shared :class:`WorkloadModel` of the
    profile's plugins) is told of every request the engine was asked to place, placed or refused
    (``placed``: every replica placed), once per request. Scoring alone would not tell it: the
    engine scores only when two or more nodes fit, so refused requests never reach ``score``."""

    def observe(self, req: Request, placed: bool) -> None: ...


@runtime_checkable
class Describing(Protocol):
    """A scorer that chooses something for itself (xpupool: its score resolution) says what and why,
    for reports (``Engine.notes``)."""

    def describe(self) -> str: ...
