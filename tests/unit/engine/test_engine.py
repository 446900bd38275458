"""Engine behaviour: replicas, gangs, explanations, profiles and policy overrides."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from xpupool.engine import ClusterState, Engine, make_profile
from xpupool.engine.context import Context
from xpupool.engine.registry import SCORERS
from xpupool.engine.scorers.base import CardScorer, Observer, PostScorer
from xpupool.engine.state import FloatArray, IntArray
from xpupool.model import DeviceRequest, Request, RequestError

from factories import T4, devices, engine_for, gpu_node


def test_gang_is_all_or_nothing() -> None:
    engine = engine_for(gpu_node("a", count=4), gpu_node("b", count=4))
    before = engine.state.dev_mem_free.copy()
    placement = engine.place(Request("g", devices=DeviceRequest(count=3), replicas=3, gang=True))
    assert not placement.ok
    assert placement.allocations == ()
    assert placement.failures[0].replica == 2
    assert "gang: replica 3 of 3" in placement.failures[0].message
    assert np.array_equal(engine.state.dev_mem_free, before)
    assert engine.state.live == {}


def test_without_gang_each_replica_stands_alone() -> None:
    engine = engine_for(gpu_node("a", count=4), gpu_node("b", count=4))
    placement = engine.place(Request("g", devices=DeviceRequest(count=3), replicas=3))
    assert len(placement.allocations) == 2
    assert len(placement.failures) == 1
    assert {a.node for a in placement.allocations} == {"a", "b"}


def test_gang_that_fits_commits_every_replica() -> None:
    engine = engine_for(gpu_node("a", count=8), gpu_node("b", count=8))
    placement = engine.place(Request("g", devices=DeviceRequest(count=4), replicas=4, gang=True))
    assert placement.ok and len(placement.allocations) == 4
    assert len(engine.state.live) == 4


def test_preemption_may_help_only_for_capacity_reasons() -> None:
    engine = engine_for(gpu_node("a", count=1))
    engine.place(devices(1))
    failure = engine.explain(devices(1))
    assert failure is not None and failure.preemption_may_help


def test_request_policy_overrides_the_cluster_profile() -> None:
    nodes = [gpu_node("a", count=2, group_size=0), gpu_node("b", count=2, group_size=0)]
    engine = engine_for(*nodes, profile="binpack")
    engine.place(devices(1, uuids=("a-gpu0",)))
    spread = Request("s", devices=DeviceRequest(count=1), node_policy="spread")
    assert engine.place(spread).allocations[0].node == "b"


def test_unknown_policy_names_the_field() -> None:
    engine = engine_for(gpu_node("a"))
    with pytest.raises(RequestError) as exc:
        engine.place(Request("s", devices=DeviceRequest(count=1), node_policy="nope"))
    assert exc.value.field == "node_policy"


def test_profiles_validate_scorers_and_weights() -> None:
    with pytest.raises(RequestError) as exc:
        make_profile("p", {"binpak": 1})
    assert exc.value.field == "profile.scorers.binpak"
    with pytest.raises(RequestError) as exc:
        make_profile("p", {"binpack": -1})
    assert exc.value.field == "profile.scorers.binpack"
    with pytest.raises(RequestError) as exc:
        make_profile("p", {"binpack": 1}, "pack")
    assert exc.value.field == "profile.device_policy"


def test_weighted_profile_combines_scorers() -> None:
    # topology dominates binpack: the 2-card request goes where both cards share a link group.
    nodes = [gpu_node("a", count=4, group_size=1), gpu_node("b", count=4, group_size=4)]
    profile = make_profile("topo", {"topology": 10, "binpack": 1})
    engine = Engine(engine_for(*nodes).state, profile)
    engine.place(devices(1, uuids=("a-gpu0",)))
    assert engine.place(devices(2)).allocations[0].node == "b"


def test_cpu_only_request_needs_no_devices() -> None:
    engine = engine_for(gpu_node("a", model=T4, memory_mib=15360))
    placement = engine.place(Request("c", cpu_milli=1000, memory_mib=100))
    assert placement.ok and placement.allocations[0].devices == ()


def test_rate_filters_and_scores_without_placing() -> None:
    engine = engine_for(gpu_node("a", count=2, group_size=0), gpu_node("b", count=1, group_size=0))
    fits, total = engine.rate(devices(2))
    assert fits.tolist() == [True, False]
    assert engine.state.live == {}
    # binpack profile = binpack (after placement: 2 of 2 cards -> 100) + topology (no groups -> 0)
    assert total[0] == 100.0
    # spread: one whole card of two leaves a half free -> 50; the 1-card node would be full -> 0
    assert engine.rate(devices(1), "spread")[1].tolist() == [50.0, 0.0]


class _Watcher:
    """A scorer that learns: it records what the engine tells it."""

    name = "watcher"

    def __init__(self) -> None:
        self.seen: list[tuple[str, bool]] = []

    def score(self, ctx: Context) -> FloatArray:
        return np.zeros(ctx.state.n_nodes)

    def observe(self, req: Request, placed: bool) -> None:
        self.seen.append((req.name, placed))


def test_engine_tells_observers_every_request_placed_or_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    watcher = _Watcher()
    assert isinstance(watcher, Observer)
    monkeypatch.setitem(SCORERS, "watcher", lambda env: watcher)
    engine = Engine(ClusterState([gpu_node("a", count=2)]), make_profile("w", {"watcher": 1}))
    engine.place(replace(devices(1), name="fits"))  # one node fits: no scoring, still observed
    engine.place(replace(devices(4), name="too-big"))
    gang = Request("gang", devices=DeviceRequest(count=2), replicas=3, gang=True)
    engine.place(gang)  # refused before any replica is tried
    assert watcher.seen == [("fits", True), ("too-big", False), ("gang", False)]


class _LastNode:
    """A scorer with a post-score step: scores favour the first node, the step picks the last."""

    name = "last-node"

    def score(self, ctx: Context) -> FloatArray:
        ctx.cycle[self.name] = "kept"
        return np.linspace(100.0, 0.0, ctx.state.n_nodes)

    def post_score(self, ctx: Context, candidates: IntArray, total: FloatArray) -> int | None:
        assert ctx.cycle[self.name] == "kept" and total[candidates[0]] == 100.0
        return int(candidates[-1])


def test_a_declared_post_score_step_chooses_after_the_sum(monkeypatch: pytest.MonkeyPatch) -> None:
    assert isinstance(_LastNode(), PostScorer)
    monkeypatch.setitem(SCORERS, "last-node", lambda env: _LastNode())
    nodes = [gpu_node(n, count=1) for n in ("a", "b", "c")]
    engine = Engine(ClusterState(nodes), make_profile("p", {"last-node": 1}))
    assert engine.place(devices(1)).allocations[0].node == "c"
    xpupool = engine_for(gpu_node("a"), profile="xpupool")
    assert xpupool.profile.post == ("lookahead",)
    (step,) = xpupool._post_steps(xpupool.profile)
    assert isinstance(step, PostScorer) and step.name == "lookahead"  # type: ignore[attr-defined]


class _Column:
    """A card scorer: card ``c`` of every node scores ``scores[c]``; node-local (kept) or not."""

    def __init__(self, name: str, scores: list[float], kept: bool) -> None:
        self.name = name
        self.scores = np.asarray(scores)
        self.kept = kept
        self.asked: list[int] = []

    def card_scores(self, ctx: Context, nodes: IntArray) -> FloatArray:
        self.asked.append(int(nodes.size))
        padded = np.pad(self.scores, (0, ctx.state.width - self.scores.size))  # absent cards: 0
        return np.tile(padded, (nodes.size, 1))

    def card_key(self, ctx: Context) -> object:
        return ctx.need_core if self.kept else None

    def score(self, ctx: Context) -> FloatArray:
        raise AssertionError("a card scorer's node score is not asked for a one-card replica")


class _NodeBonus:
    """A node scorer: node ``b`` gets 10."""

    name = "bonus"

    def score(self, ctx: Context) -> FloatArray:
        return np.where(np.asarray(ctx.state.node_names) == "b", 10.0, 0.0)


def test_card_scores_are_summed_per_card_and_the_best_card_is_placed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Per card: 1 * [0, 50, 40, 0] + 2 * [0, 0, 10, 30] = [0, 50, 60, 60]: card 2 (the first of
    # the best); on node b the node scorer adds 10, so b wins, on its card 2. Then b's card 2 is
    # taken: b's best is card 3, and b still wins.
    first = _Column("first", [0, 50, 40, 0], kept=True)
    second = _Column("second", [0, 0, 10, 30], kept=False)
    assert isinstance(first, CardScorer)
    monkeypatch.setitem(SCORERS, "first", lambda env: first)
    monkeypatch.setitem(SCORERS, "second", lambda env: second)
    monkeypatch.setitem(SCORERS, "bonus", lambda env: _NodeBonus())
    nodes = [gpu_node(n, count=4, group_size=0) for n in ("a", "b")]
    profile = make_profile("cards", {"first": 1, "second": 2, "bonus": 1})
    engine = Engine(ClusterState(nodes), profile)
    fits, total = engine.rate(devices(1))
    assert fits.tolist() == [True, True] and total.tolist() == [60.0, 70.0]
    for card in ("b-gpu2", "b-gpu3"):
        (alloc,) = engine.place(devices(1)).allocations
        assert (alloc.node, alloc.devices[0].uuid) == ("b", card)
    # Kept scores are asked again only for the node that changed; the others every request.
    assert first.asked == [2, 1] and second.asked == [2, 2, 2]
    # One node fits (nothing is scored): the replica still goes to its best card.
    only = engine.place(devices(1, uuids=("a-gpu0", "a-gpu1", "a-gpu3")))
    assert only.allocations[0].devices[0].uuid == "a-gpu3"
