"""Gangs stay in one site (issue 42, part 3): a gang is placed wholly within one site unless it
asks to span sites (``span-sites``); the refusal and the verdict say when no single site can hold
it though the pool could. The cycle's side (its wait, preemption in one site) is in
``test_cycle.py``."""

from __future__ import annotations

from collections import Counter

from xpupool.engine import ClusterState, Engine, Placement
from xpupool.engine.verdict import Verdicts
from xpupool.model import Node, Request
from xpupool.model.request_model import RequestModel

from factories import T4, gpu_node


def t4(name: str, site: str, count: int, group_size: int = 0) -> Node:
    return gpu_node(name, site=site, model=T4, memory_mib=15360, count=count, group_size=group_size)


def three_sites(c_cards: int = 8) -> ClusterState:
    """site-a: 4 T4s, site-b: 2, site-c: ``c_cards`` (pool order a, b, c)."""
    return ClusterState(
        [t4("a-0", "site-a", 4), t4("b-0", "site-b", 2), t4("c-0", "site-c", c_cards)]
    )


def ask(text: str) -> Request:
    return RequestModel.model_validate(text).to_request()


def sites_of(state: ClusterState, placement: Placement) -> Counter[str]:
    return Counter(state.nodes[a.node_index].site for a in placement.allocations)


# ---------------------------------------------------------------------------------- the engine
def test_a_gang_is_placed_wholly_within_one_site() -> None:
    state = three_sites()
    placed = Engine(state, "binpack").place(ask("T4 replicas=7 gang"))
    assert placed.ok
    assert sites_of(state, placed) == {"site-c": 7}


def test_the_site_is_where_the_profile_scores_the_gang_best() -> None:
    """Among the sites that could hold the whole gang, its first replica goes where the profile
    would put it (here the request's preferred site) and the others follow it there."""
    for preferred in ("site-a", "site-c"):
        state = ClusterState(
            [t4("a-0", "site-a", 8), t4("b-0", "site-b", 2), t4("c-0", "site-c", 8)]
        )
        placed = Engine(state, "binpack").place(ask(f"T4 replicas=7 gang prefer-site={preferred}"))
        assert sites_of(state, placed) == {preferred: 7}


def test_no_single_site_holding_it_now_refuses_it_saying_so_and_changes_nothing() -> None:
    state = three_sites(c_cards=2)  # 4 + 2 + 2 cards: the pool holds 7, no site does
    engine = Engine(state, "binpack")
    placed = engine.place(ask("T4 replicas=7 gang"))
    assert not placed.ok and not placed.allocations and not state.live
    message = placed.failures[0].message
    assert "gang: no single site holds 7 replicas at once (the most: site-a, 4)" in message
    assert "span-sites" in message
    assert "0/3 nodes fit: 3 insufficient device memory" in message  # each full once the rest are


def test_span_sites_lets_a_gang_span_sites() -> None:
    state = three_sites(c_cards=2)
    placed = Engine(state, "binpack").place(ask("T4 replicas=7 gang span-sites"))
    assert placed.ok and len(sites_of(state, placed)) == 3


def test_replicas_without_gang_spread_freely() -> None:
    state = three_sites(c_cards=2)
    placed = Engine(state, "binpack").place(ask("T4 replicas=7"))
    assert placed.ok and len(sites_of(state, placed)) == 3


def test_the_request_sites_bound_the_sites_tried() -> None:
    pool = [t4("a-0", "site-a", 8), t4("b-0", "site-b", 4), t4("c-0", "site-c", 8)]
    for text, where in (
        ("T4 replicas=6 gang site=site-a,site-b prefer-site=site-b", "site-a"),
        ("T4 replicas=6 gang site=!site-a prefer-site=site-b", "site-c"),
        ("T4 replicas=3 gang site=!site-a prefer-site=site-b", "site-b"),
    ):
        state = ClusterState(pool)
        placed = Engine(state, "binpack").place(ask(text))
        assert sites_of(state, placed) == {where: placed.request.replicas}, text


def test_one_named_site_too_small_says_how_many_fit_as_before() -> None:
    state = three_sites()
    placed = Engine(state, "binpack").place(ask("T4 replicas=7 gang site=site-b"))
    assert not placed.ok
    assert "gang: replica 3 of 7 fits nowhere; at most 2 fit at once" in placed.failures[0].message


def test_a_site_whose_link_groups_fail_a_later_replica_gives_way_to_the_next() -> None:
    """The room bound counts cards, not link groups: site-a's node (link groups of 3 and 1 cards)
    seems to hold two linked pairs but holds one. Its gang is rolled back and placed in site-b."""
    state = ClusterState([t4("a-0", "site-a", 4, group_size=3), t4("b-0", "site-b", 4, 4)])
    placed = Engine(state, "binpack").place(ask("T4:2 nvlink replicas=2 gang prefer-site=site-a"))
    assert placed.ok and sites_of(state, placed) == {"site-b": 2}
    assert len(state.live) == 2


def test_a_single_site_pool_places_as_before() -> None:
    one = ClusterState([t4("n0", "default", 4), t4("n1", "default", 2), t4("n2", "default", 2)])
    placed = Engine(one, "binpack").place(ask("T4 replicas=7 gang"))
    assert placed.ok and len({a.node for a in placed.allocations}) == 3


# ----------------------------------------------------------------------------------- verdicts
def test_the_verdict_names_replicas_when_no_site_could_ever_hold_the_gang() -> None:
    verdicts = Verdicts(three_sites(c_cards=2))
    miss = verdicts.never_fits(ask("T4 replicas=7 gang"))
    assert miss is not None and miss.field == "replicas"
    assert miss.reason == (
        "no single site holds 7 replicas of this, even empty (the largest: site-a, 4); "
        "add span-sites to place it across sites"
    )
    assert verdicts.never_fits(ask("T4 replicas=7 gang span-sites")) is None
    assert verdicts.never_fits(ask("T4 replicas=4 gang")) is None
    whole = verdicts.never_fits(ask("T4 replicas=9 gang"))  # more than the whole pool holds
    assert whole is not None and "the whole pool, empty, holds 8 replicas" in whole.reason
