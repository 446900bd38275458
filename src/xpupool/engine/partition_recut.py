"""Which card to re-cut, and how, when a partition request finds no free instance of its profile.

A card in partition mode can destroy and create instances on its free slices while the others run
(MIG's ``-dgi``/``-cgi``; vNPU's destroy/create), so a request for a profile no card has free can
often be served by re-cutting one. Which card, and where on it, decides what the pool can still
serve afterwards: a ``1g`` cut at slice 0 of an idle A100 leaves room for one ``3g`` (at 4), a
``1g`` at slice 6 leaves room for a ``4g`` (at 0) and a ``2g``. The choice here scores each
candidate by FGD's fragmentation of the target workload (Weng et al., ATC'23; the engine's
measure, ``engine/fragmentation``), read per card with the partition geometry's own account of
what free slices can still hold (``catalog.partition_geometry.room_for``): the card's idle compute
minus, per workload shape it could serve, what that shape's instances could still occupy of it
(``room_for`` after the instances held), weighted by the shape's probability. Free instances
count as free slices, since a later re-cut may reclaim them; a shape asking for no partition of
this scheme sees all of it as fragment, as the engine's measure sees a free instance for shapes
not asking its profile.

The order of preference, most important first: a card that needs no re-cut (a free instance of
the profile is there); the least fragment left; the fewest instances destroyed; the fewest
created; then the card's index and the layout, so the answer is deterministic. HAMi v2.10's rule
(``engine/hami_mig.py``) answers the same question with the same signature but without the
workload, which is what the partition study (``bench/partitions.py``) compares.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from functools import lru_cache

from xpupool.catalog.partition_geometry import Instance, Layout, layout_problem, room_for
from xpupool.catalog.partitions import PartitionScheme
from xpupool.engine.fragmentation import TargetWorkload
from xpupool.engine.lru import Lru

__all__ = ["ProfileWeights", "card_fragment", "profile_weights", "recut_choice"]

ProfileWeights = tuple[tuple[str, float], ...]
"""The target workload as a card of one scheme sees it: per profile of the scheme that some shape
asks for, the shapes' summed probability, in the scheme's profile order. Shapes asking for no
partition of the scheme are left out: for them the whole card is fragment."""

Key = tuple[int, float, int, int, Layout]
CardAsk = tuple[Layout, frozenset[Instance], str, "ProfileWeights"]


def profile_weights(scheme: PartitionScheme, workload: TargetWorkload) -> ProfileWeights:
    """Which profile of ``scheme`` each shape of ``workload`` takes, weights summed per profile.

    A shape takes a profile by name (``devices.partition``) or as the smallest profile holding
    its isolated memory (``devices.isolated_mib``, ``PartitionScheme.smallest_holding``), as the
    ``DevicePartition`` filter places it. A shape asking for several instances counts as one per
    card: the others may come from the node's other cards."""
    summed: dict[str, float] = {}
    for shape, weight in zip(workload.shapes, workload.weights, strict=True):
        d = shape.devices
        name = d.partition
        if name is None and d.isolated_mib is not None:
            smallest = scheme.smallest_holding(d.isolated_mib)
            name = None if smallest is None else smallest.name
        if d.count < 1 or name is None or scheme.profile(name) is None:
            continue
        summed[name] = summed.get(name, 0.0) + weight
    return tuple((p, summed[p]) for p in scheme.profile_names if p in summed)


def card_fragment(scheme: PartitionScheme, held: Layout, weights: ProfileWeights) -> float:
    """The expected fragment, in thousandths of a card, of a card whose instances ``held`` hold
    work: FGD's ``T - sum_m p_m * [m fits] * U_m`` with ``T`` the compute not held and ``U_m``
    the compute the instances of shape m's profile could still occupy (``room_for``: free
    instances are free slices). Shapes outside ``weights`` add ``p_m * T``. ``held`` must be a
    valid layout; its order does not matter."""
    return _fragment(scheme, _canonical(held), weights)


@lru_cache(maxsize=65_536)
def _fragment(scheme: PartitionScheme, held: Layout, weights: ProfileWeights) -> float:
    """:func:`card_fragment` of a canonical ``held``, kept: a pool's cards repeat a few states."""
    compute_of = {p.name: p.compute for p in scheme.profiles}
    idle = scheme.compute_slices - sum(compute_of[name] for name, _ in held)
    room = room_for(scheme, held)
    usable = sum(w * min(idle, room[name] * compute_of[name]) for name, w in weights)
    return round((idle - usable) * 1000.0 / scheme.compute_slices, 9)


def recut_choice(
    scheme: PartitionScheme,
    cards: Sequence[tuple[Layout, frozenset[Instance]]],
    profile: str,
    workload: TargetWorkload,
) -> tuple[int, Layout] | None:
    """The card to serve one more instance of ``profile`` and its whole layout afterwards.

    ``cards[i]`` is card i's current layout (valid for ``scheme``) and the instances of it that
    hold work (busy); a vNPU instance has no position, so a busy vNPU profile marks every
    instance of that profile on the card busy. The layout returned keeps every busy instance
    exactly and has a free instance of ``profile``: the current layout when one is free there,
    else the current one with the fewest free instances destroyed and the new one created (the
    order of preference is the module docstring's). None when no card can hold one more, even
    re-cut, or the scheme has no such profile. Pure; the same answer for the same arguments.
    """
    if scheme.profile(profile) is None:
        return None
    weights = profile_weights(scheme, workload)
    best: tuple[Key, int] | None = None
    kept = _choices(scheme)
    for index, (layout, busy) in enumerate(cards):
        asked = (layout, busy, profile, weights)
        hit = kept.get(asked)
        if hit is None:
            hit = kept.put(
                asked, (_card_choice(scheme, _canonical(layout), busy, profile, weights),)
            )
        key = hit[0]
        if key is not None and (best is None or key < best[0]):
            best = (key, index)
    return None if best is None else (best[1], best[0][4])


def _canonical(layout: Sequence[Instance]) -> Layout:
    return tuple(sorted(layout, key=lambda i: (i[0], -1 if i[1] is None else i[1])))


_CHOICES: dict[int, tuple[PartitionScheme, Lru[CardAsk, tuple[Key | None]]]] = {}


def _choices(scheme: PartitionScheme) -> Lru[CardAsk, tuple[Key | None]]:
    """The choices kept for ``scheme``'s cards: a pool's cards repeat a few states, and hashing
    the scheme (all its profiles) with each card would cost more than the lookup saves, so the
    cache is per scheme object (kept alive here, so its id is not reused)."""
    found = _CHOICES.get(id(scheme))
    if found is None:
        found = _CHOICES[id(scheme)] = (scheme, Lru(65_536))
    return found[1]


def _card_choice(
    scheme: PartitionScheme,
    layout: Layout,
    busy: frozenset[Instance],
    profile: str,
    weights: ProfileWeights,
) -> Key | None:
    """The best key (see :data:`Key`) for one card, its new layout last; None when it cannot
    hold one more ``profile``."""
    held = tuple(i for i in layout if i in busy)
    free = [i for i in layout if i not in busy]
    ready = sorted({i for i in free if i[0] == profile}, key=lambda i: -1 if i[1] is None else i[1])
    if ready:  # no re-cut: the instance that leaves the least fragment
        return min((0, card_fragment(scheme, (*held, n), weights), 0, 0, layout) for n in ready)
    found: list[Key] = []
    for start in _starts(scheme, held, profile):
        new = (profile, start)
        for dropped in range(len(free) + 1):
            kept = _keep(scheme, held, free, new, dropped)
            if kept is not None:
                grown = _canonical((*held, *kept, new))
                fragment = card_fragment(scheme, (*held, new), weights)
                found.append((1, fragment, dropped, 1, grown))
                break
    return min(found, default=None)


def _starts(scheme: PartitionScheme, held: Layout, profile: str) -> tuple[int | None, ...]:
    """Where the new instance may go once every free instance is destroyed."""
    p = scheme.profile(profile)
    assert p is not None
    starts: tuple[int | None, ...] = p.starts if scheme.positional else (None,)
    return tuple(s for s in starts if layout_problem(scheme, (*held, (profile, s))) is None)


def _keep(
    scheme: PartitionScheme,
    held: Layout,
    free: list[Instance],
    new: Instance,
    dropped: int,
) -> tuple[Instance, ...] | None:
    """The free instances kept when ``dropped`` of them are destroyed to make room for ``new``:
    the first valid choice in layout order, or None when no choice of that many is valid."""
    for gone in itertools.combinations(range(len(free)), dropped):
        kept = tuple(x for i, x in enumerate(free) if i not in gone)
        if layout_problem(scheme, (*held, *kept, new)) is None:
            return kept
    return None
