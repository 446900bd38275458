"""The placement pipeline for one replica: filter -> score -> choose a node; explain when none fits.

The fast path ANDs whole-cluster masks and never formats a reason. The filters that run are the
request's profile's (``registry.filter_chain``; the engine says which profile a request has through
:attr:`Pipeline.filters_off`). The selector part of the device mask (vendor, model, UUID, card size,
software, health) is cached per request selectors, static filters run and state epoch, so a stream
of similar requests pays only for the capacity checks. Only when nothing fits does
:meth:`Pipeline.explain` replay the chain stage by stage to count why, per node, like kube's FitError.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from xpupool.engine.card_scores import POSITIONS_BOUND, CardScores
from xpupool.engine.compiled import jit
from xpupool.engine.context import Context
from xpupool.engine.device_fit import CAPACITY_PARTS, DeviceFitCache, count_per_node
from xpupool.engine.filters.base import NodeDetails, Stage
from xpupool.engine.filters.chain import FilterChain
from xpupool.engine.filters.device_health import DeviceHealth
from xpupool.engine.filters.software import HOPE_ORDER, NO_HOPE
from xpupool.engine.lru import Lru
from xpupool.engine.physical_room import physical_room
from xpupool.engine.reasons import Reason, ReasonCount, Unschedulable
from xpupool.engine.registry import filter_chain
from xpupool.engine.scorers.base import CandidateScorer, PostScorer, Scorer
from xpupool.engine.state import BoolArray, ClusterState, CountArray, FloatArray, IntArray
from xpupool.model.request import WHOLE, Request

# Eligible masks ([N, W] bools: 40 KB each at 5,000 nodes of 8 cards, 10 MB at the bound) by
# request selectors, static filters and epoch; and cards' MiB for a share ([N, W] ints) by share
# and epoch. A stream of requests uses a few dozen of each; the bound only stops a long-running
# server's distinct selectors from piling up.
ELIGIBLE_BOUND = 256
SHARES_BOUND = 256
STATIC_BLAME_BOUND = 64


CONDITION_FILTERS = frozenset({DeviceHealth.name})
"""Static device filters about a card's condition now (unhealthy, cordoned), which passes:
:meth:`Pipeline.selectable` leaves them out."""


class Pipeline:
    """Filters and scores requests against one :class:`ClusterState`."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self.eligible_cache: Lru[tuple[object, ...], BoolArray] = Lru(ELIGIBLE_BOUND)
        self.shares_cache: Lru[tuple[int, int], IntArray] = Lru(SHARES_BOUND)
        self.device_fits = DeviceFitCache(state)
        # A refusal's static part per (selectors, k, epoch, static filters): [N] ints and an
        # [N, W] mask each, for the few dozen shapes that are refused in a stream.
        self.static_blame_cache: Lru[tuple[object, ...], _StaticPart] = Lru(STATIC_BLAME_BOUND)
        self.card_scores = CardScores(state)
        # Which of a profile's scorers score the candidates alone (a protocol check costs
        # microseconds; a request would pay it per scorer): one entry per profile in use.
        self.on_candidates: Lru[tuple[tuple[Scorer, float], ...], tuple[bool, ...]] = Lru(
            POSITIONS_BOUND
        )
        # The filters a request's profile turns off; the engine installs its profiles' answer.
        self.filters_off: Callable[[Request], frozenset[str]] = lambda req: frozenset()

    # ------------------------------------------------------------------ context
    def context(self, req: Request) -> Context:
        d = req.devices
        off = self.filters_off(req)
        if d.count == 0:
            return Context(req, self.state, 0, 0, 0, filters_off=off)
        need_mib: int | IntArray
        if d.memory_mib is not None:
            need_mib = d.memory_mib
        elif d.whole:  # all the card may commit: only an untouched card has it, and it stays alone
            need_mib = self.state.dev_mem_commit
        else:
            permille = d.need_memory_permille or WHOLE
            need_mib = self._share_of_cards(permille)
        ctx = Context(req, self.state, d.count, need_mib, d.need_core_permille, filters_off=off)
        ctx.physical = physical_room(self.state, req, need_mib, ctx.need_core)
        return ctx

    def _share_of_cards(self, permille: int) -> IntArray:
        key = (permille, self.state.epoch)
        found = self.shares_cache.get(key)
        if found is None:
            # Rounded down: n shares of 1/n of a card always fit on it.
            found = self.shares_cache.put(key, (self.state.dev_mem_total * permille) // WHOLE)
        return found

    def eligible(self, ctx: Context) -> BoolArray:
        """``[N, W]`` devices the request's selectors accept, ignoring free capacity (cached)."""
        return self._accepted(ctx, self.state.dev_usable, "usable")

    def selectable(self, ctx: Context) -> BoolArray:
        """``[N, W]`` devices of the pool the request's selectors accept, whether usable now or
        cordoned or unhealthy (cached): what a verdict about every future of the pool, such as
        a quota's (``cycle/admission.py`` ``inadmissible``), may count on."""
        return self._accepted(ctx, self.state.dev_present, "present", skip=CONDITION_FILTERS)

    def _accepted(
        self, ctx: Context, base: BoolArray, tag: str, skip: frozenset[str] = frozenset()
    ) -> BoolArray:
        chain = filter_chain(ctx.filters_off)
        key = (ctx.req.devices.selector_key(), self.state.epoch, chain.static_key, tag)
        found = self.eligible_cache.get(key)
        if found is not None:
            return found
        mask = base
        for f in (f for f in chain.static if f.name not in skip):
            part = f.device_mask(ctx.req, self.state, ctx)
            if part is not None and part is not mask:
                mask = mask & part
        return self.eligible_cache.put(key, np.ascontiguousarray(mask))

    # ------------------------------------------------------------------ fast path
    def filter(self, ctx: Context) -> BoolArray:
        """``[N]`` nodes that can take one replica now; also sets ``ctx.dev_fit``."""
        s = self.state
        chain = filter_chain(ctx.filters_off)
        fit = s.node_ok
        for nf in chain.node[1:]:
            part = nf.node_mask(ctx.req, s)
            if part is not None:
                fit = fit & part
        if ctx.k and ctx.within is None and ctx.physical is None:
            # The dynamic filters are the capacity predicate, which the shape cache applies
            # to the nodes that changed since the shape was last asked.
            known = self.device_fits.get(
                ctx.req.devices, ctx.filters_off, self.eligible(ctx), ctx.need_mib, ctx.need_core
            )
            ctx.dev_fit = known.dev_fit
            ctx.group_best = known.group_best
            ctx.passed = known.passed
            fit = fit & (known.count >= ctx.k)
            group = chain.group_for(ctx.req.devices.topology, ctx.k)
            if group is not None:
                assert known.group_best is not None  # kept for every request of several cards
                fit = fit & (known.group_best >= ctx.k)
        elif ctx.k:
            dev = self.eligible(ctx) if ctx.within is None else self.eligible(ctx) & ctx.within
            for df in chain.dynamic:
                part = df.device_mask(ctx.req, s, ctx)
                if part is not None:
                    dev = dev & part
            if ctx.physical is not None:  # a guaranteed share: never on over-committed capacity
                dev = dev & ctx.physical
            ctx.dev_fit = dev
            fit = fit & (count_per_node(dev) >= ctx.k)
            group = chain.group_for(ctx.req.devices.topology, ctx.k)
            if group is not None:
                fit = fit & group.node_mask(s, dev, ctx.k)
        ctx.node_fit = fit
        return fit

    def choose(
        self,
        ctx: Context,
        scorers: tuple[tuple[Scorer, float], ...],
        post: tuple[PostScorer, ...] = (),
    ) -> int:
        """Index of the best fitting node, or -1: the first post-score step's choice, else the
        best weighted sum. Ties go to the lowest ``state.rank``."""
        candidates = ctx.candidates()
        if candidates.size <= 1:
            return int(candidates[0]) if candidates.size else -1
        total = self.weighted(ctx, scorers, candidates)
        if total is not None:
            for step in post:
                node = step.post_score(ctx, candidates, total)
                if node is not None:
                    return node
            return int(_best(candidates, total, self.state.rank))
        return int(candidates[np.argmin(self.state.rank[candidates])])

    def weighted(
        self, ctx: Context, scorers: tuple[tuple[Scorer, float], ...], candidates: IntArray
    ) -> FloatArray | None:
        """``[N]`` the weighted sum of the scorers on ``candidates`` (None without scorers; other
        nodes' values mean nothing): for a one-card replica, each node's best card by the card
        scorers' sum (``card_scores.py``, which sets ``ctx.cards``) plus the other scorers' node
        scores. Formed over the candidates when a scorer rates cards or scores the candidates
        alone (``CandidateScorer``), else over every node."""
        if not scorers:
            return None
        cards = self.card_scores.choose(ctx, scorers, candidates)
        on_candidates = self.on_candidates.get(scorers)
        if on_candidates is None:
            on_candidates = self.on_candidates.put(
                scorers, tuple(isinstance(s, CandidateScorer) for s, _ in scorers)
            )
        if cards is None and not any(on_candidates):  # [N] scores only (binpack, spread)
            return self._weighted_nodes(ctx, scorers)
        sub: FloatArray | None = None  # [S]: the sum is formed over the candidates only
        for i, (scorer, weight) in enumerate(scorers):
            if cards is not None and i in cards.used:
                continue
            if on_candidates[i]:
                part = cast(CandidateScorer, scorer).score_on(ctx, candidates)
            else:
                whole = scorer.score(ctx)
                part = None if whole is None else whole[candidates]
            if part is None:  # no preference for this request
                continue
            sub = part * weight if sub is None else sub + part * weight
        if cards is not None:
            sub = cards.best if sub is None else cards.best + sub
        total = np.zeros(self.state.n_nodes, np.float64)  # every scorer skipped: all alike
        if sub is not None:
            total[candidates] = sub
        return total

    def _weighted_nodes(
        self, ctx: Context, scorers: tuple[tuple[Scorer, float], ...]
    ) -> FloatArray:
        """The weighted sum of scorers that all give ``[N]`` scores, over every node: with one or
        two scorers, cheaper than reading each at the candidates."""
        total: FloatArray | None = None
        for scorer, weight in scorers:
            part = scorer.score(ctx)
            if part is None:  # no preference for this request
                continue
            total = part * weight if total is None else total + part * weight
        return np.zeros(self.state.n_nodes, np.float64) if total is None else total

    # ------------------------------------------------------------------ explaining
    def explain(self, ctx: Context) -> Unschedulable:
        """Per-reason node counts for a replica that fits nowhere: each node is blamed on the first
        check that leaves it unable to take the replica."""
        labels, blame = self._blame(ctx)
        return _count(labels, blame, self.state.n_nodes)

    def blame(self, ctx: Context) -> IntArray:
        """``[N]`` the :class:`Reason` code each node fails first (``Reason.FITS`` where it fits)."""
        labels, blame = self._blame(ctx)
        codes = np.asarray([int(reason) for reason, _ in labels], np.int64)
        result: IntArray = codes[blame]
        return result

    def node_reasons(self, ctx: Context) -> tuple[list[tuple[Reason, str]], IntArray]:
        """Per node, why it fails: ``(labels, blame)``, where ``blame[n]`` indexes ``labels``
        (``(reason, detail)``; index 0 is ``Reason.FITS``). For fronts that answer per node, as a
        scheduler extender's ``FailedNodes`` does; the counts of :meth:`explain` come from the
        same two."""
        return self._blame(ctx)

    def _blame(self, ctx: Context) -> tuple[list[tuple[Reason, str]], IntArray]:
        s = self.state
        chain = filter_chain(ctx.filters_off)
        if ctx.k and ctx.within is None and ctx.physical is None and ctx.passed is not None:
            static = self._static_blame(ctx, chain)
            if static.is_eligible and chain.dynamic_names == CAPACITY_PARTS:
                return self._blame_from_counts(ctx, chain, static.blame, ctx.passed)
        out = _Blame(s.n_nodes)
        for ok, reason, detail in _node_checks(chain, ctx.req, s):
            out.fail(ok, reason, detail)
        if ctx.k:
            # What the static checks blame depends only on the selectors and the inventory:
            # computed once per shape and epoch, it goes to the nodes no node check blamed.
            static = self._static_blame(ctx, chain)
            out.merge(static.blame)
            dev = static.dev
            for df in chain.dynamic:
                if df is chain.dynamic[0] and ctx.within is not None:
                    dev = dev & ctx.within
                    out.fail(count_per_node(dev) >= ctx.k, Reason.OUTSIDE_ASSIGNMENT)
                for stage in df.stages(ctx.req, s, ctx):
                    dev = out.stage(stage, dev, ctx.k)
            if ctx.physical is not None:
                dev = dev & ctx.physical
                out.fail(count_per_node(dev) >= ctx.k, Reason.PHYSICAL_CAPACITY)
            group = chain.group_for(ctx.req.devices.topology, ctx.k)
            if group is not None:
                out.fail(group.node_mask(s, dev, ctx.k), group.reason)
        return out.labels, out.blame

    def _blame_from_counts(
        self, ctx: Context, chain: FilterChain, static: _Blame, passed: CountArray
    ) -> tuple[list[tuple[Reason, str]], IntArray]:
        """:meth:`_blame` without the replay, for a request the capacity cache answered: the
        capacity parts' per-node counts (``passed``, kept current by ``DeviceFitCache``) say which
        part fails first. Labels are numbered in the checks' order, as the replay numbers them
        (a later check has a higher label: the verdicts' closest miss reads the deepest), and the
        checks are applied last to first, each overwriting, so that every node keeps the first
        it fails; a property test holds the two equal."""
        s, k = self.state, ctx.k
        labels: list[tuple[Reason, str]] = [(Reason.FITS, "")]
        node_checks: list[tuple[BoolArray, int]] = []  # (nodes failing, label), in order
        for ok, reason, detail in _node_checks(chain, ctx.req, s):
            labels.append((reason, detail))
            node_checks.append((ok, len(labels) - 1))
        static_offset = len(labels) - 1
        labels.extend(static.labels[1:])
        capacity_checks: list[tuple[BoolArray, int]] = []
        for row, df in enumerate(chain.dynamic):
            labels.append((df.reason, ""))
            capacity_checks.append((passed[row] < k, len(labels) - 1))
        group = chain.group_for(ctx.req.devices.topology, k)
        if group is not None:
            assert ctx.group_best is not None  # kept for every request of several cards
            labels.append((group.reason, ""))
            capacity_checks.append((ctx.group_best < k, len(labels) - 1))
        blame = np.zeros(s.n_nodes, np.int64)
        for fails, label in reversed(capacity_checks):
            np.copyto(blame, label, where=fails)
        np.copyto(blame, static.blame + static_offset, where=static.blame > 0)
        for ok, label in reversed(node_checks):
            np.copyto(blame, label, where=~ok)
        return labels, blame

    def _static_blame(self, ctx: Context, chain: FilterChain) -> _StaticPart:
        """The static device checks' part of :meth:`_blame` as if no node check failed, and the
        devices they leave; cached per selectors, ``k``, epoch and static filters."""
        key = (ctx.req.devices.selector_key(), ctx.k, self.state.epoch, chain.static_key)
        found = self.static_blame_cache.get(key)
        if found is None:
            s = self.state
            out = _Blame(s.n_nodes)
            dev = s.dev_present.copy()
            usable: list[Stage] = []
            # Kind first, then count, then usability (kube-scheduler's first failing filter in a
            # fixed order): a node without a single card of the kind asked is blamed on the
            # selector that excludes its last one, whatever its card count or health; "too few"
            # is left for nodes that have the kind, and "unhealthy" for nodes with enough of it.
            for df in chain.static:
                stages = df.stages(ctx.req, s, ctx)
                if isinstance(df, DeviceHealth):
                    usable.extend(stages)
                    continue
                for stage in stages:
                    dev = out.stage(stage, dev, 1)
            out.fail(count_per_node(dev) >= ctx.k, Reason.TOO_FEW_DEVICES)
            for stage in usable:
                dev = out.stage(stage, dev, ctx.k)
            same = bool(np.array_equal(dev, self.eligible(ctx)))
            found = self.static_blame_cache.put(key, _StaticPart(out, dev, same))
        return found


def _node_checks(
    chain: FilterChain, req: Request, state: ClusterState
) -> Iterator[tuple[BoolArray, Reason, str]]:
    """The node filters that run, in order, as (nodes passing, reason, detail); a filter that
    words each node (:class:`NodeDetails`: which taint) as one check per distinct detail of its
    failing nodes, which are disjoint, so each node is still blamed on the first it fails."""
    for nf in chain.node:
        part = nf.node_mask(req, state)
        if part is None:
            continue
        if isinstance(nf, NodeDetails):
            codes, texts = nf.details(req, state)
            failing = ~part
            for code in np.unique(codes[failing]).tolist():
                yield ~(failing & (codes == code)), nf.reason, texts[code] if code >= 0 else ""
            continue
        reason, detail = nf.why(req)
        yield part, reason, detail


@dataclass(frozen=True, slots=True)
class _StaticPart:
    """A refusal's static part: the blame, the devices left, and whether those are the request's
    eligible devices (then the capacity cache's counts continue from them)."""

    blame: _Blame
    dev: BoolArray
    is_eligible: bool


class _Blame:
    """Each node's first failed check while an explanation replays the chain: ``blame [N]``
    indexes ``labels`` (0 is FITS)."""

    def __init__(self, n_nodes: int) -> None:
        self.labels: list[tuple[Reason, str]] = [(Reason.FITS, "")]
        self.blame = np.zeros(n_nodes, np.int64)

    def label(self, reason: Reason, detail: str = "") -> int:
        self.labels.append((reason, detail))
        return len(self.labels) - 1

    def fail(self, ok: BoolArray, reason: Reason, detail: str = "") -> None:
        newly = (self.blame == 0) & ~ok
        if newly.any():
            self.blame[newly] = self.label(reason, detail)

    def stage(self, stage: Stage, dev: BoolArray, k: int) -> BoolArray:
        """Blame the nodes that ``stage`` leaves with fewer than ``k`` devices (1 for a selector:
        none of the kind left); the devices left."""
        before, dev = dev, dev & stage.mask
        ok = count_per_node(dev) >= k
        if stage.codes is None:
            self.fail(ok, stage.reason, stage.detail)
            return dev
        # Blame each newly failing node on its most hopeful rejected device.
        newly = (self.blame == 0) & ~ok
        if stage.detail_codes is not None and stage.details:
            self._worded(stage, before, newly)
            return dev
        rejected = np.where(before & ~stage.mask, stage.codes, NO_HOPE).min(axis=1)
        for hope, reason in enumerate(HOPE_ORDER):
            hit = newly & (rejected == hope)
            if hit.any():
                self.blame[hit] = self.label(reason, stage.detail)
        rest = newly & (rejected >= NO_HOPE)
        if rest.any():
            self.blame[rest] = self.label(stage.reason, stage.detail)
        return dev

    def _worded(self, stage: Stage, before: BoolArray, newly: BoolArray) -> None:
        """:meth:`stage` for a stage whose devices carry their own detail: each newly failing
        node takes its most hopeful rejected device, ties to the lowest detail index, and one
        label per distinct (reason, detail) seen."""
        assert stage.codes is not None and stage.detail_codes is not None
        width = len(stage.details)
        combined = stage.codes * width + stage.detail_codes
        worst = NO_HOPE * width
        rejected = np.where(before & ~stage.mask, combined, worst).min(axis=1)
        for value in np.unique(rejected[newly]).tolist():
            hit = newly & (rejected == value)
            if value >= worst:
                self.blame[hit] = self.label(stage.reason, stage.detail)
            else:
                hope, index = divmod(value, width)
                self.blame[hit] = self.label(HOPE_ORDER[hope], stage.details[index])

    def merge(self, earlier: _Blame) -> None:
        """Blame on ``earlier``'s labels the nodes it blamed and this has not (its checks come
        after this one's so far)."""
        newly = (self.blame == 0) & (earlier.blame > 0)
        if newly.any():
            self.blame[newly] = earlier.blame[newly] + (len(self.labels) - 1)
            self.labels.extend(earlier.labels[1:])


def _best_loop(candidates: Any, total: Any, rank: Any) -> int:
    """The candidate with the highest total, the lowest rank among equal totals: one compiled
    pass for what would be five array operations."""
    best = candidates[0]
    for c in candidates[1:]:
        if total[c] > total[best] or (total[c] == total[best] and rank[c] < rank[best]):
            best = c
    return int(best)


_best = jit(_best_loop)


def _count(labels: list[tuple[Reason, str]], blame: IntArray, total: int) -> Unschedulable:
    per_label: list[int] = np.bincount(blame, minlength=len(labels)).tolist()
    merged: dict[tuple[Reason, str], int] = {}
    for i, n in enumerate(per_label):
        if n and i:
            merged[labels[i]] = merged.get(labels[i], 0) + n
    fits = per_label[0]
    if fits:
        raise AssertionError(f"explain found {fits} fitting nodes for an unschedulable request")
    ordered = sorted(merged.items(), key=lambda kv: (-kv[1], kv[0][0], kv[0][1]))
    return Unschedulable(total, tuple(ReasonCount(r, n, d) for (r, d), n in ordered))
