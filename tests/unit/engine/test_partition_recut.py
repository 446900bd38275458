"""The re-cut choice on hand-worked cards: the measure, the order of preference, what it refuses."""

from __future__ import annotations

from xpupool.catalog.partition_geometry import Instance, Layout, layout_problem
from xpupool.engine.fragmentation import TargetWorkload
from xpupool.engine.partition_recut import card_fragment, profile_weights, recut_choice
from xpupool.model import DeviceRequest, Request

from factories import partition_scheme

A100 = partition_scheme("A100-SXM4-80GB")


def _workload(*shapes: tuple[DeviceRequest, float]) -> TargetWorkload:
    return TargetWorkload(
        tuple(Request(f"s{i}", 1000, 0, d) for i, (d, _) in enumerate(shapes)),
        tuple(w for _, w in shapes),
    )


def _card(layout: Layout, busy: tuple[Instance, ...] = ()) -> tuple[Layout, frozenset[Instance]]:
    return layout, frozenset(busy)


def test_weights_follow_profiles_by_name_and_by_isolated_memory() -> None:
    workload = _workload(
        (DeviceRequest(count=1, partition="3g.40gb"), 0.5),
        (DeviceRequest(count=1, isolated_mib=15 * 1024), 0.25),  # smallest holding: 1g.20gb
        (DeviceRequest(count=1, core_permille=300), 0.25),  # a share: no partition
    )
    assert profile_weights(A100, workload) == (("1g.20gb", 0.25), ("3g.40gb", 0.5))


def test_fragment_is_idle_compute_less_what_the_workload_could_still_cut() -> None:
    weights = (("4g.40gb", 0.5), ("3g.40gb", 0.5))
    # a 1g at slice 6: 6 idle slices; a 4g fits (4 usable), a 3g fits at 0 only (3 usable)
    at_end = card_fragment(A100, (("1g.10gb", 6),), weights)
    assert at_end == round((6 - 0.5 * 4 - 0.5 * 3) * 1000 / 7, 9)
    # a 1g at slice 0: no 4g any more, one 3g at 4
    at_start = card_fragment(A100, (("1g.10gb", 0),), weights)
    assert at_start == round((6 - 0.5 * 3) * 1000 / 7, 9)
    assert at_end < at_start
    # a shape asking no partition of the scheme sees the whole idle card
    assert card_fragment(A100, (), ()) == 1000.0


def test_an_idle_card_gets_its_1g_where_the_workload_keeps_room() -> None:
    workload = _workload((DeviceRequest(count=1, partition="4g.40gb"), 1.0))
    found = recut_choice(A100, [_card(())], "1g.10gb", workload)
    assert found is not None
    index, layout = found
    ones = [i for i in layout if i[0] == "1g.10gb"]
    assert index == 0 and len(ones) == 1
    assert ones[0][1] is not None and ones[0][1] >= 4  # a 4g still fits at 0
    assert ("4g.40gb", 0) in layout  # and is cut for the workload's next task


def test_a_free_instance_beats_any_re_cut_and_busy_instances_stay() -> None:
    workload = _workload((DeviceRequest(count=1, partition="1g.10gb"), 1.0))
    cut = (("3g.40gb", 0), ("3g.40gb", 4))
    ready = (("1g.10gb", 0), ("3g.40gb", 4))
    found = recut_choice(
        A100, [_card(cut, (("3g.40gb", 4),)), _card(ready, (("3g.40gb", 4),))], "1g.10gb", workload
    )
    assert found == (1, ready)  # no re-cut on card 1


def test_the_fewest_free_instances_are_destroyed() -> None:
    workload = _workload((DeviceRequest(count=1, partition="3g.40gb"), 1.0))
    # card 0: 1g at 0 and 1g at 2 free; a 3g at 4 needs nothing destroyed (created only)
    layout = (("1g.10gb", 0), ("1g.10gb", 2), ("1g.10gb", 4))
    found = recut_choice(A100, [_card(layout, (("1g.10gb", 0),))], "3g.40gb", workload)
    assert found is not None
    _, new = found
    assert ("1g.10gb", 0) in new and ("3g.40gb", 4) in new
    assert ("1g.10gb", 2) in new  # kept: only the 1g at 4 is in the way
    assert layout_problem(A100, new) is None


def test_refused_when_no_card_can_hold_it_or_the_profile_is_unknown() -> None:
    workload = _workload((DeviceRequest(count=1, partition="7g.80gb"), 1.0))
    busy = (("1g.10gb", 3),)
    assert recut_choice(A100, [_card(busy, busy)], "7g.80gb", workload) is None
    assert recut_choice(A100, [_card(())], "9g.90gb", workload) is None
    assert recut_choice(A100, [], "1g.10gb", workload) is None


def test_vnpu_cards_are_cut_from_their_totals() -> None:
    scheme = partition_scheme("910B3")
    small = scheme.profiles[0].name
    workload = _workload((DeviceRequest(count=1, partition=small), 1.0))
    found = recut_choice(scheme, [_card(((small, None),), ((small, None),))], small, workload)
    assert found is not None
    _, layout = found
    assert layout.count((small, None)) >= 2  # the one held, the one asked, and as many more fit
    assert layout_problem(scheme, (*layout, (small, None))) is not None
    assert layout_problem(scheme, layout) is None


def test_a_re_cut_cuts_the_free_slices_for_the_workload_so_the_next_task_needs_none() -> None:
    workload = _workload((DeviceRequest(count=1, partition="1g.10gb"), 1.0))
    first = recut_choice(A100, [_card(())], "1g.10gb", workload)
    assert first is not None
    _, layout = first
    assert layout_problem(A100, layout) is None
    taken = next(i for i in layout if i[0] == "1g.10gb")
    # the second 1g task finds a free instance: the same layout, no second re-cut
    assert recut_choice(A100, [_card(layout, (taken,))], "1g.10gb", workload) == (0, layout)
    assert len(layout) == 7  # every free slice cut into the workload's 1g


def test_the_free_slices_are_cut_into_the_profiles_the_workload_asks() -> None:
    workload = _workload(
        (DeviceRequest(count=1, partition="3g.40gb"), 0.9),
        (DeviceRequest(count=1, partition="1g.10gb"), 0.1),
    )
    found = recut_choice(A100, [_card(())], "1g.10gb", workload)
    assert found is not None
    _, layout = found
    assert layout_problem(A100, layout) is None
    assert sum(1 for i in layout if i[0] == "3g.40gb") == 1  # a 3g for the next 3g task
    assert all(i[0] in ("1g.10gb", "3g.40gb") for i in layout)
