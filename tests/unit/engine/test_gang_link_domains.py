"""Gangs stay in one link domain of a site where the site names one (issue 51): a Kubernetes zone
or a network block, given to the engine as ``Node.link_domain``. The placement, the refusal and
the never-fits verdict count per domain as they count per site (``test_gang_sites.py``)."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest

from xpupool.engine import ClusterState, Engine, Placement
from xpupool.engine.verdict import Verdicts
from xpupool.model import Node, Request
from xpupool.model.errors import RequestError
from xpupool.model.request_model import RequestModel

from factories import T4, gpu_node


def t4(name: str, site: str, count: int, zone: str | None) -> Node:
    node = gpu_node(name, site=site, model=T4, memory_mib=15360, count=count, group_size=0)
    return replace(node, link_domain=zone)


def two_zones(cards: int = 1) -> list[Node]:
    """Site gpu-a: zone-1 and zone-2 of two nodes each, ``cards`` T4s per node."""
    return [
        t4("z1-0", "gpu-a", cards, "zone-1"),
        t4("z2-0", "gpu-a", cards, "zone-2"),
        t4("z1-1", "gpu-a", cards, "zone-1"),
        t4("z2-1", "gpu-a", cards, "zone-2"),
    ]


def ask(text: str) -> Request:
    return RequestModel.model_validate(text).to_request()


def zones_of(state: ClusterState, placement: Placement) -> Counter[str | None]:
    return Counter(state.nodes[a.node_index].link_domain for a in placement.allocations)


def test_a_gang_that_fits_in_one_zone_is_placed_wholly_in_it() -> None:
    for policy in ("binpack", "spread"):
        state = ClusterState(two_zones())
        placed = Engine(state, policy).place(ask("T4 replicas=2 gang"))
        assert placed.ok, placed.failures
        assert len(zones_of(state, placed)) == 1, (policy, zones_of(state, placed))


def test_a_gang_no_zone_holds_is_refused_saying_so_and_changes_nothing() -> None:
    """Two free cards per zone, four in the site: a gang of three waits, with the reason."""
    state = ClusterState(two_zones())
    placed = Engine(state, "binpack").place(ask("T4 replicas=3 gang"))
    assert not placed.ok and not placed.allocations and not state.live
    message = placed.failures[0].message
    assert "gang: no single link domain holds 3 replicas at once (the most: gpu-a/zone-1, 2)" in (
        message
    )


def test_replicas_without_gang_and_span_sites_gangs_cross_zones() -> None:
    for text in ("T4 replicas=3", "T4 replicas=3 gang span-sites"):
        state = ClusterState(two_zones())
        placed = Engine(state, "binpack").place(ask(text))
        assert placed.ok and len(zones_of(state, placed)) == 2, text


def test_the_verdict_names_the_largest_zone_when_none_could_ever_hold_it() -> None:
    verdicts = Verdicts(ClusterState(two_zones()))
    miss = verdicts.never_fits(ask("T4 replicas=3 gang"))
    assert miss is not None and miss.field == "replicas"
    assert miss.reason.startswith(
        "no single link domain holds 3 replicas of this, even empty (the largest: gpu-a/zone-1, 2)"
    )
    assert verdicts.never_fits(ask("T4 replicas=2 gang")) is None
    assert verdicts.never_fits(ask("T4 replicas=3 gang span-sites")) is None


def test_a_site_without_zones_beside_a_zoned_one_is_one_domain() -> None:
    """gpu-a: two zones of two cards; gpu-b names no zones and has three cards on three nodes:
    the gang of three goes to gpu-b, though gpu-a has more cards."""
    pool = [*two_zones(), *(t4(f"b-{i}", "gpu-b", 1, None) for i in range(3))]
    state = ClusterState(pool)
    assert state.link_domains.keys == ["gpu-a/zone-1", "gpu-a/zone-2", "gpu-b"]
    placed = Engine(state, "binpack").place(ask("T4 replicas=3 gang prefer-site=gpu-a"))
    assert placed.ok
    assert Counter(state.nodes[a.node_index].site for a in placed.allocations) == {"gpu-b": 3}


def test_nodes_of_a_zoned_site_without_the_label_share_the_sites_own_domain() -> None:
    pool = [
        t4("z1-0", "gpu-a", 2, "zone-1"),
        t4("u-0", "gpu-a", 2, None),
        t4("u-1", "gpu-a", 2, None),
    ]
    state = ClusterState(pool)
    placed = Engine(state, "binpack").place(ask("T4 replicas=4 gang"))
    assert placed.ok and zones_of(state, placed) == {None: 4}


def test_a_zone_whose_later_replica_fails_gives_way_to_the_next() -> None:
    """The room bound counts cards, not link groups: zone-1's node seems to hold two linked pairs
    (four cards, groups of three and one) but holds one; the gang is placed in zone-2."""
    linked = gpu_node("z1-0", site="gpu-a", model=T4, memory_mib=15360, count=4, group_size=3)
    other = gpu_node("z2-0", site="gpu-a", model=T4, memory_mib=15360, count=4, group_size=4)
    state = ClusterState(
        [replace(linked, link_domain="zone-1"), replace(other, link_domain="zone-2")]
    )
    placed = Engine(state, "binpack").place(ask("T4:2 nvlink replicas=2 gang"))
    assert placed.ok and zones_of(state, placed) == {"zone-2": 2}


def test_a_request_kept_to_a_domain_is_refused_elsewhere_naming_it() -> None:
    state = ClusterState(two_zones())
    engine = Engine(state, "binpack")
    kept = replace(ask("T4"), sites=("gpu-a",), link_domains=("gpu-a/zone-2",))
    ctx = engine.feasible(kept)
    assert [state.nodes[i].link_domain for i in ctx.node_fit.nonzero()[0]] == ["zone-2"] * 2
    refusal = engine.explain(replace(kept, link_domains=("gpu-a/zone-3",)))
    assert refusal is not None
    assert "4 not in site gpu-a/zone-3" in refusal.message


def test_a_node_link_domain_is_a_non_empty_name() -> None:
    with pytest.raises(RequestError) as caught:
        Node("n0", 1000, 1024, link_domain="")
    assert caught.value.field == "link_domain"
