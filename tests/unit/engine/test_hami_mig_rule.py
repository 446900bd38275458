"""HAMi v2.10's MIG rule as ported (engine/hami_mig.py) does what HAMi's own tests say, at commit
4707fb02 (pkg/device/nvidia/mig_topology_test.go, one test here per Go case, named after it),
orders cards as HAMi's spread policy does, serves a request by its memory as HAMi does, and
whatever it returns is a valid layout keeping every busy instance."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xpupool.catalog.partition_geometry import Instance, Layout, layout_problem, valid_layouts
from xpupool.catalog.partitions import PartitionScheme, load_partitions
from xpupool.engine.hami_mig import (
    Placement,
    can_place,
    hami_mig_choice,
    hami_profiles,
    select_placement,
)

CATALOG = load_partitions()
MIG = [s for s in CATALOG.schemes if s.positional]

# mig_topology_test.go's `allowed` (both tests): the A100-40GB's three smaller profiles
ALLOWED: dict[str, list[Placement]] = {
    "1g.5gb": [(s, 1) for s in range(7)],
    "2g.10gb": [(0, 2), (2, 2), (4, 2)],
    "3g.20gb": [(0, 4), (4, 4)],
}


def _scheme(model: str) -> PartitionScheme:
    found = CATALOG.scheme_for(model)
    assert found is not None
    return found


A100_40 = _scheme("A100-SXM4-40GB")


@pytest.mark.parametrize(
    ("occupied", "requested", "feasible"),
    [
        pytest.param([], ["3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb"], True, id="all-balanced"),
        pytest.param([(4, 4)], ["2g.10gb", "1g.5gb", "1g.5gb"], True, id="remaining-balanced"),
        pytest.param([(0, 4), (4, 4)], ["1g.5gb"], False, id="two-active-3g"),
        pytest.param([(0, 2), (2, 2), (4, 2)], ["2g.10gb"], False, id="fourth-2g"),
    ],
)
def test_can_place_mig_profiles_a100(
    occupied: list[Placement], requested: list[str], feasible: bool
) -> None:
    """TestCanPlaceMigProfilesA100, its four checks in order."""
    assert can_place(ALLOWED, occupied, requested) is feasible


def test_can_place_backtracks() -> None:
    """Two profiles of two placements each: the larger first placement goes first, its first
    start (0, two slices) leaves the other nothing, so canPlaceMigProfiles backtracks it to its
    second placement; one instance at a time (selectMigPlacement) fails on the same table."""
    table: dict[str, list[Placement]] = {"x.a": [(0, 1), (1, 1)], "y.b": [(0, 2), (0, 1)]}
    assert can_place(table, [], ["x.a", "y.b"])
    first = select_placement(table, [], "y.b")
    assert first == (0, 2) and select_placement(table, [first], "x.a") is None
    assert not can_place(ALLOWED, [], ["4g.20gb"])  # a profile the table lacks


def test_select_mig_placement_uses_balanced_packing() -> None:
    """TestSelectMigPlacementUsesBalancedPacking: 3g at 4, 2g at 0, then 1g at 3 and 2."""
    occupied: list[Placement] = []
    for profile, start in (("3g.20gb", 4), ("2g.10gb", 0), ("1g.5gb", 3), ("1g.5gb", 2)):
        placement = select_placement(ALLOWED, occupied, profile)
        assert placement is not None and placement[0] == start, profile
        occupied.append(placement)


def test_balanced_packing_through_the_choice() -> None:
    """The same sequence through hami_mig_choice on one A100-40GB card whose instances all
    run: the catalog's A100-40GB geometry is the Go test's table."""
    layout: Layout = ()
    for profile, start in (("3g.20gb", 4), ("2g.10gb", 0), ("1g.5gb", 3), ("1g.5gb", 2)):
        found = hami_mig_choice(A100_40, [(layout, frozenset(layout))], profile)
        assert found is not None
        index, layout = found
        assert index == 0 and layout[-1] == (profile, start)
    assert layout_problem(A100_40, layout) is None


def test_profiles_are_the_charts_allowlist() -> None:
    """device-configmap.yaml's migProfileAllowlist: 1g, 2g, 3g and the whole card per model."""
    names = {s.models[0]: [p.name for p in hami_profiles(s)] for s in MIG}
    assert names["A100-SXM4-40GB"] == ["1g.5gb", "2g.10gb", "3g.20gb", "7g.40gb"]
    assert names["A100-SXM4-80GB"] == ["1g.10gb", "2g.20gb", "3g.40gb", "7g.80gb"]
    assert names["H200-SXM5-141GB"] == ["1g.18gb", "2g.35gb", "3g.71gb", "7g.141gb"]
    assert names["A30"] == ["1g.6gb", "2g.12gb", "4g.24gb"]


def test_spread_takes_the_least_used_card_then_the_last() -> None:
    """gpu_policy.go Less (spread: higher score first) and Fit walking from the end: empty cards
    tie and the last is taken; a card with a running instance scores higher and waits."""
    empty: tuple[Layout, frozenset[Instance]] = ((), frozenset())
    one: Layout = (("1g.5gb", 6),)
    assert hami_mig_choice(A100_40, [empty, empty], "1g.5gb") == (1, (("1g.5gb", 6),))
    busy = (one, frozenset(one))
    assert hami_mig_choice(A100_40, [empty, busy], "1g.5gb") == (0, (("1g.5gb", 6),))
    assert hami_mig_choice(A100_40, [busy, empty], "1g.5gb") == (1, (("1g.5gb", 6),))


def test_free_instances_are_dropped_and_busy_kept() -> None:
    """HAMi keeps no idle instance (migmgr.go Release): the free 3g at 0 is gone, the busy 1g
    at 6 stays, and the 3g asked is cut at HAMi's preferred start 0 (4 overlaps the 1g)."""
    layout: Layout = (("3g.20gb", 0), ("1g.5gb", 6))
    found = hami_mig_choice(A100_40, [(layout, frozenset({("1g.5gb", 6)}))], "3g.20gb")
    assert found == (0, (("1g.5gb", 6), ("3g.20gb", 0)))


def test_served_by_memory_as_hami_asks() -> None:
    """selectMigCandidate: the smallest allowlisted memory that holds the ask, then fewest
    slices; a full card for that profile falls up to a larger one on the same card."""
    empty: tuple[Layout, frozenset[Instance]] = ((), frozenset())
    assert hami_mig_choice(A100_40, [empty], "1g.10gb") == (0, (("2g.10gb", 0),))
    assert hami_mig_choice(A100_40, [empty], "4g.20gb") == (0, (("3g.20gb", 4),))
    assert hami_mig_choice(A100_40, [empty], "1g.5gb+me") is None
    two_2g: Layout = (("2g.10gb", 0), ("2g.10gb", 2), ("1g.5gb", 5))
    found = hami_mig_choice(A100_40, [(two_2g, frozenset(two_2g))], "2g.10gb")
    assert found is None  # 2g at 4 meets the 1g at 5; 3g and 7g overlap too
    full: Layout = (("7g.40gb", 0),)
    assert hami_mig_choice(A100_40, [(full, frozenset(full))], "1g.5gb") is None
    assert hami_mig_choice(A100_40, [(full, frozenset())], "1g.5gb") == (0, (("1g.5gb", 6),))


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError, match="no profile"):
        hami_mig_choice(A100_40, [], "9g.1gb")
    with pytest.raises(ValueError, match="not in its layout"):
        hami_mig_choice(A100_40, [((), frozenset({("1g.5gb", 0)}))], "1g.5gb")
    with pytest.raises(ValueError, match="MIG scheme"):
        hami_mig_choice(_scheme("910B3"), [], "vir05_1c_16g")


@st.composite
def _cards(draw: st.DrawFn) -> tuple[PartitionScheme, list[tuple[Layout, frozenset[Instance]]]]:
    scheme = draw(st.sampled_from(MIG))
    layouts = valid_layouts(scheme)
    cards = []
    for _ in range(draw(st.integers(1, 4))):
        layout = draw(st.sampled_from(layouts))
        keep = draw(st.lists(st.booleans(), min_size=len(layout), max_size=len(layout)))
        cards.append((layout, frozenset(i for i, k in zip(layout, keep, strict=True) if k)))
    return scheme, cards


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_cards(), st.data())
def test_result_is_valid_and_keeps_busy(
    drawn: tuple[PartitionScheme, list[tuple[Layout, frozenset[Instance]]]], data: st.DataObject
) -> None:
    scheme, cards = drawn
    profile = data.draw(st.sampled_from(scheme.profile_names))
    asked = scheme.profile(profile)
    assert asked is not None
    found = hami_mig_choice(scheme, cards, profile)
    if found is None:
        idle = all(not busy for _, busy in cards)
        assert asked.media or not idle, "an idle card always takes a plain profile"
        return
    index, layout = found
    assert 0 <= index < len(cards)
    assert layout_problem(scheme, layout) is None
    busy = cards[index][1]
    assert busy <= set(layout)
    (added,) = set(layout) - busy
    offered = {p.name: p for p in hami_profiles(scheme)}
    assert added[0] in offered and offered[added[0]].memory_mib >= asked.memory_mib
