"""Sites and labels (issue 21, part 3): the NodeSite and NodeSelector filters, the site
preference scorer, what explanations and verdicts say, and the masks behind them."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from xpupool.engine import ClusterState, Engine
from xpupool.engine.context import Context
from xpupool.engine.filters.node_selector import NodeSelector
from xpupool.engine.filters.node_site import NodeSite
from xpupool.engine.fragmentation.measure import TargetWorkload
from xpupool.engine.profile import BUILTIN_PROFILES, make_profile
from xpupool.engine.scorers.base import MAX_SCORE, MIN_SCORE
from xpupool.engine.scorers.site_preference import SitePreference
from xpupool.engine.verdict import Verdicts
from xpupool.model import Node, Request
from xpupool.model.request_model import RequestModel

from factories import T4, gpu_node


def labelled(node: Node, **labels: str) -> Node:
    return replace(node, labels=labels)


def pool() -> ClusterState:
    """bj-0, bj-1 in beijing (bj-1 labelled pool=a), sh-0 in shanghai (pool=b, rack=r1),
    sh-t4 in shanghai with T4s."""
    return ClusterState(
        [
            gpu_node("bj-0", site="beijing", count=2),
            labelled(gpu_node("bj-1", site="beijing", count=2), pool="a"),
            labelled(gpu_node("sh-0", site="shanghai", count=2), pool="b", rack="r1"),
            gpu_node("sh-t4", site="shanghai", model=T4, memory_mib=15360, count=2),
        ]
    )


def ask(text: str) -> Request:
    return RequestModel.model_validate(text).to_request()


def names(state: ClusterState, mask: np.ndarray) -> set[str]:
    return {state.node_names[i] for i in np.flatnonzero(mask)}


@pytest.mark.parametrize(
    ("text", "nodes"),
    [
        ("site=beijing", {"bj-0", "bj-1"}),
        ("site=beijing,shanghai", {"bj-0", "bj-1", "sh-0", "sh-t4"}),
        ("site=!beijing", {"sh-0", "sh-t4"}),
        ("site=shanghai,!shanghai", set()),
        ("site=nowhere", set()),
    ],
)
def test_site_mask(text: str, nodes: set[str]) -> None:
    state = pool()
    mask = NodeSite().node_mask(ask(text), state)
    assert mask is not None and names(state, mask) == nodes
    assert NodeSite().node_mask(ask(text), state) is mask  # made once, then looked up


@pytest.mark.parametrize(
    ("text", "nodes"),
    [
        ("label=pool=a", {"bj-1"}),
        ("label=pool=b label=rack=r1", {"sh-0"}),  # every label must be on the node
        ("label=pool=a label=rack=r1", set()),
        ("label=pool=c", set()),
        ("label=zone=x", set()),
    ],
)
def test_label_mask(text: str, nodes: set[str]) -> None:
    state = pool()
    mask = NodeSelector().node_mask(ask(text), state)
    assert mask is not None and names(state, mask) == nodes


def test_no_site_or_label_asks_nothing_of_the_filters() -> None:
    state = pool()
    assert NodeSite().node_mask(ask("A100"), state) is None
    assert NodeSelector().node_mask(ask("A100"), state) is None


def test_masks_follow_a_new_node() -> None:
    state = pool()
    assert not NodeSite().node_mask(ask("site=hangzhou"), state).any()  # type: ignore[union-attr]
    state.add_node(labelled(gpu_node("hz-0", site="hangzhou", count=2), pool="a"))
    assert names(state, NodeSite().node_mask(ask("site=hangzhou"), state)) == {"hz-0"}  # type: ignore[arg-type]
    assert names(state, NodeSelector().node_mask(ask("label=pool=a"), state)) == {"bj-1", "hz-0"}  # type: ignore[arg-type]


def test_placement_keeps_to_the_site_and_labels() -> None:
    engine = Engine(pool(), "binpack")
    placed = engine.place(ask("A100 site=shanghai"))
    assert placed.ok and placed.allocations[0].node == "sh-0"
    placed = engine.place(ask("A100 label=pool=a"))
    assert placed.ok and placed.allocations[0].node == "bj-1"


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("T4 site=beijing", "2 not in site beijing"),
        ("T4 site=!shanghai", "2 in excluded site shanghai"),
        ("A100 label=pool=b label=rack=r2", "label pool=b,rack=r2 not on node"),
    ],
)
def test_explain_names_the_site_or_label(text: str, words: str) -> None:
    why = Engine(pool(), "binpack").explain(ask(text))
    assert why is not None and words in why.message


def test_site_preference_is_bounded_and_follows_the_site() -> None:
    state = pool()
    req = ask("A100 prefer-site=shanghai")
    ctx = Context(req, state, 1, 1, 0)
    scores = SitePreference().score(ctx)
    assert scores.min() >= MIN_SCORE and scores.max() <= MAX_SCORE
    assert names(state, scores == MAX_SCORE) == {"sh-0", "sh-t4"}
    assert not SitePreference().score(Context(ask("A100"), state, 1, 1, 0)).any()


@pytest.mark.parametrize("profile", sorted(BUILTIN_PROFILES))
def test_every_builtin_profile_honours_the_preference(profile: str) -> None:
    workload = TargetWorkload.from_requests([ask("A100"), ask("A100:2")])
    engine = Engine(pool(), profile, workload=workload)
    placed = engine.place(ask("A100 prefer-site=shanghai"))
    assert placed.ok and placed.allocations[0].node == "sh-0"
    placed = engine.place(ask("A100:2 prefer-site=shanghai"))  # sh-0 has one card left
    assert placed.ok and placed.allocations[0].node in {"bj-0", "bj-1"}  # the others still fit


def test_without_a_preference_the_site_scorer_changes_nothing() -> None:
    """The same requests on a profile with and without the site scorer land alike."""
    with_site = Engine(pool(), "binpack")
    without = Engine(pool(), make_profile("plain", {"binpack": 1, "topology": 1}))
    for text in ["A100", "A100 mem=10Gi", "T4", "A100:2", "any cores=50%", "A100"]:
        a, b = with_site.place(ask(text)), without.place(ask(text))
        assert [x.node for x in a.allocations] == [x.node for x in b.allocations], text
        assert [x.devices for x in a.allocations] == [x.devices for x in b.allocations], text


@pytest.mark.parametrize(
    ("text", "field", "words"),
    [
        ("A100 site=shangai", "site", "no node in site 'shangai'; sites: beijing, shanghai"),
        ("T4 site=beijing", "site", "no node in site beijing can hold it"),
        ("A100 site=!beijing,!shanghai", "site", "every site of the pool is excluded"),
        ("A100 label=pool=c", "node_selector.pool", "no node has label pool=c; values of pool"),
        ("T4 label=pool=a", "node_selector", "no node has all of pool=a"),
    ],
)
def test_never_fits_names_the_site_or_label(text: str, field: str, words: str) -> None:
    miss = Verdicts(pool()).never_fits(ask(text))
    assert miss is not None and miss.field == field and words in miss.reason, miss


def test_a_site_that_fits_is_no_verdict() -> None:
    assert Verdicts(pool()).never_fits(ask("A100 site=shanghai label=rack=r1")) is None
