"""The re-cut choice agrees with a brute force over every valid layout on small cards.

Random pools of A30 cards (4 slices, every layout enumerable) and A100-80GB cards (7 slices), each
cut into a random valid layout with a random subset of its instances busy, and a random workload
over the scheme's profiles. The reference tries every layout of ``valid_layouts`` on every card
that keeps the busy instances and has a free instance of the profile, scores it with the same
measure and the same order of preference (re-cut needed, fragment left, instances destroyed,
what the workload would find cut and free, instances created), and the choice must be valid, keep
every busy instance and score no worse than the best of them.
"""

from __future__ import annotations

from collections import Counter
from functools import cache

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xpupool.catalog.partition_geometry import Instance, Layout, layout_problem, valid_layouts
from xpupool.catalog.partitions import PartitionScheme, load_partitions
from xpupool.engine.fragmentation import TargetWorkload
from xpupool.engine.partition_recut import (
    card_fragment,
    profile_weights,
    ready_fragment,
    recut_choice,
)
from xpupool.model import DeviceRequest, Request

from strategies import examples

SETTINGS = settings(
    max_examples=examples(50), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
CATALOG = load_partitions()
SCHEMES = tuple(
    s for s in (CATALOG.scheme_for("A30"), CATALOG.scheme_for("A100-SXM4-80GB")) if s is not None
)

Card = tuple[Layout, frozenset[Instance]]


@st.composite
def pools(draw: st.DrawFn) -> tuple[PartitionScheme, list[Card], str, TargetWorkload]:
    scheme = draw(st.sampled_from(SCHEMES))
    layouts = valid_layouts(scheme)
    cards: list[Card] = []
    for _ in range(draw(st.integers(1, 3))):
        layout = draw(st.sampled_from(layouts))
        busy = frozenset(i for i in layout if draw(st.booleans()))
        cards.append((layout, busy))
    profile = draw(st.sampled_from(scheme.profile_names))
    asked = draw(st.lists(st.sampled_from(scheme.profile_names), min_size=0, max_size=3))
    raw = [draw(st.integers(1, 5)) for _ in asked]
    shapes = tuple(
        Request(f"s{i}", 0, 0, DeviceRequest(count=1, partition=p)) for i, p in enumerate(asked)
    )
    weights = tuple(w / sum(raw) for w in raw)
    return scheme, cards, profile, TargetWorkload(shapes, weights)


def _reference_key(
    scheme: PartitionScheme, card: Card, new: Layout, profile: str, workload: TargetWorkload
) -> tuple[int, float, int, float, int] | None:
    """The score of re-cutting ``card`` to ``new`` for one more ``profile``; None when ``new``
    drops a busy instance or has no free instance of the profile."""
    layout, busy = card
    held = [i for i in layout if i in busy]
    have, want = Counter(layout), Counter(new)
    if Counter(held) - want:
        return None
    free_new = want - Counter(held)
    ready = [i for i in free_new if i[0] == profile]
    if not ready:
        return None
    weights = profile_weights(scheme, workload)
    fragment = min(_fragment(scheme, _sorted((*held, n)), weights) for n in ready)
    destroyed = sum((have - want).values())
    created = sum((want - have).values())
    waiting = ready_fragment(scheme, (*held, ready[0]), new, weights)
    return (0 if have == want else 1, fragment, destroyed, waiting, created)


def _sorted(layout: Layout) -> Layout:
    return tuple(sorted(layout, key=lambda i: (i[0], -1 if i[1] is None else i[1])))


@cache
def _fragment(
    scheme: PartitionScheme, held: Layout, weights: tuple[tuple[str, float], ...]
) -> float:
    """The measure of one held set (sorted by the caller), computed once: the reference asks for
    the same sets across hundreds of layouts."""
    return card_fragment(scheme, held, weights)


@SETTINGS
@given(pools())
def test_the_choice_is_valid_keeps_busy_work_and_is_no_worse_than_any_layout(
    case: tuple[PartitionScheme, list[Card], str, TargetWorkload],
) -> None:
    scheme, cards, profile, workload = case
    reference = [
        key
        for card in cards
        for new in valid_layouts(scheme)
        if (key := _reference_key(scheme, card, new, profile, workload)) is not None
    ]
    found = recut_choice(scheme, cards, profile, workload)
    if not reference:
        assert found is None
        return
    assert found is not None
    index, new = found
    assert layout_problem(scheme, new) is None
    key = _reference_key(scheme, cards[index], new, profile, workload)
    assert key is not None  # keeps every busy instance and has a free one of the profile
    assert key == min(reference)
