"""The partition geometry agrees with a brute-force reference on small cards.

The reference knows nothing of bit masks or canonical growth: it marks memory slices in a list,
sums totals, and tries every subset of candidate instances. On the A30 (4 slices, 13 placements)
and the 910B3 it enumerates every layout; on the 7-slice MIG cards it checks random layouts and,
for each profile, the most instances that can still be added, by trying every subset.
"""

from __future__ import annotations

import itertools
from collections import Counter

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xpupool.catalog.partition_geometry import (
    Instance,
    layout_problem,
    placements_for,
    room_for,
    valid_layouts,
)
from xpupool.catalog.partitions import PartitionScheme, load_partitions

from strategies import examples

SETTINGS = settings(
    max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
CATALOG = load_partitions()
MIG7 = [s for s in CATALOG.schemes if s.positional and s.compute_slices == 7]


def _scheme(name: str) -> PartitionScheme:
    found = CATALOG.scheme_for(name)
    assert found is not None
    return found


def reference_valid(scheme: PartitionScheme, layout: list[Instance]) -> bool:
    slices = [False] * scheme.memory_slices
    counts = Counter(name for name, _ in layout)
    compute = memory = aicpu = 0
    for name, start in layout:
        p = scheme.profile(name)
        assert p is not None
        if p.max_instances is not None and counts[name] > p.max_instances:
            return False
        compute += p.compute
        memory += p.memory_mib
        aicpu += p.aicpu
        if scheme.positional:
            if start not in p.starts:
                return False
            assert start is not None
            for s in range(start, start + p.memory_slices):
                if s >= len(slices) or slices[s]:
                    return False
                slices[s] = True
    if sum(1 for name, _ in layout if name.endswith("+me")) > 1:
        return False
    if compute > scheme.compute_slices:
        return False
    if not scheme.positional and memory > scheme.memory_mib:
        return False
    return not (scheme.aicpu and aicpu > scheme.aicpu)


def candidates(scheme: PartitionScheme) -> list[Instance]:
    if scheme.positional:
        return [(p.name, s) for p in scheme.profiles for s in p.starts]
    # a vNPU card holds at most compute_slices instances of its smallest template
    most = scheme.compute_slices // min(p.compute for p in scheme.profiles)
    return [(p.name, None) for p in scheme.profiles for _ in range(most)]


def canonical(layout: tuple[Instance, ...]) -> tuple[Instance, ...]:
    return tuple(sorted(layout, key=lambda i: (i[0], -1 if i[1] is None else i[1])))


def test_every_a30_and_910b3_layout_matches_exhaustive_search() -> None:
    for name in ("A30", "910B3"):
        scheme = _scheme(name)
        cands = candidates(scheme)
        expected = {
            canonical(tuple(cands[i] for i in subset))
            for k in range(len(cands) + 1)
            for subset in itertools.combinations(range(len(cands)), k)
            if reference_valid(scheme, [cands[i] for i in subset])
        }
        got = {canonical(layout) for layout in valid_layouts(scheme)}
        assert got == expected, name
        assert len(valid_layouts(scheme)) == len(got)  # each layout once


def _room_reference(scheme: PartitionScheme, layout: list[Instance], name: str) -> int:
    own = [c for c in candidates(scheme) if c[0] == name]
    best = 0
    for k in range(1, len(own) + 1):
        if any(
            reference_valid(scheme, layout + list(extra))
            for extra in itertools.combinations(own, k)
        ):
            best = k
    return best


@st.composite
def mig_layouts(draw: st.DrawFn) -> tuple[PartitionScheme, list[Instance]]:
    scheme = draw(st.sampled_from(MIG7))
    cands = candidates(scheme)
    picked = draw(st.lists(st.sampled_from(cands), max_size=6, unique=True))
    return scheme, picked


@SETTINGS
@given(mig_layouts())
def test_mig_layout_checks_and_room_match_the_reference(
    case: tuple[PartitionScheme, list[Instance]],
) -> None:
    scheme, layout = case
    ok = reference_valid(scheme, layout)
    assert (layout_problem(scheme, layout) is None) is ok
    if not ok:
        return
    room = room_for(scheme, tuple(layout))
    for profile in scheme.profiles:
        assert room[profile.name] == _room_reference(scheme, layout, profile.name), profile.name
        starts = placements_for(scheme, tuple(layout), profile.name)
        expected = tuple(
            s for s in profile.starts if reference_valid(scheme, [*layout, (profile.name, s)])
        )
        assert starts == expected


def test_seven_slice_layouts_are_all_valid_and_include_the_guides_examples() -> None:
    scheme = _scheme("A100-SXM4-80GB")
    layouts = {canonical(x) for x in valid_layouts(scheme)}
    assert all(reference_valid(scheme, list(x)) for x in layouts)
    # the guide's mixes: 4g+2g+1g, 3g+3g; a 3g at 0 with a 4g anywhere is refused
    assert canonical((("4g.40gb", 0), ("2g.20gb", 4), ("1g.10gb", 6))) in layouts
    assert canonical((("3g.40gb", 0), ("3g.40gb", 4))) in layouts
    assert not any(("3g.40gb", 0) in x and any(n == "4g.40gb" for n, _ in x) for x in layouts)
