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

A re-cut cuts the card's free slices for the workload too, not the asked instance alone: cutting
one instance per re-cut makes each later task whose profile has no free instance cost another
re-cut, where a layout cut for the expected profiles lets it take a free one. Beside the asked
instance, the layout gets the instances of the workload's profiles that leave the least
:func:`ready_fragment` (the idle compute less what each profile finds cut and free, weighted by
its probability), the fewest of them on a tie, so free slices stay uncut only where cutting them
serves the workload no better. The fragment above is unchanged by these (free instances count as
free slices), so they never move the asked instance.

The order of preference, most important first: a card that needs no re-cut (a free instance of
the profile is there); the least fragment left; the fewest instances destroyed; the least
:func:`ready_fragment`; the fewest instances created; then the card's index and the layout, so
the answer is deterministic. HAMi v2.10's rule
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

__all__ = ["ProfileWeights", "card_fragment", "profile_weights", "ready_fragment", "recut_choice"]

ProfileWeights = tuple[tuple[str, float], ...]
"""The target workload as a card of one scheme sees it: per profile of the scheme that some shape
asks for, the shapes' summed probability, in the scheme's profile order. Shapes asking for no
partition of the scheme are left out: for them the whole card is fragment."""

Key = tuple[int, float, int, float, int, Layout]
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
    else the current one with the fewest free instances destroyed, the new one created and the
    free slices left cut for the workload (the order of preference is the module docstring's).
    None when no card can hold one more, even re-cut, or the scheme has no such profile. Pure;
    the same answer for the same arguments.
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
    return None if best is None else (best[1], best[0][5])


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
        waiting = ready_fragment(scheme, (*held, ready[0]), layout, weights)
        return min(
            (0, card_fragment(scheme, (*held, n), weights), 0, waiting, 0, layout) for n in ready
        )
    found: list[Key] = []
    for start in _starts(scheme, held, profile):
        new = (profile, start)
        taken = (*held, new)
        fragment = card_fragment(scheme, taken, weights)
        for dropped in range(len(free) + 1):
            choices = _kept(scheme, taken, free, dropped)
            for kept in choices:  # each, as the free slices they leave are cut differently
                waiting, added = _fill(scheme, _canonical((*taken, *kept)), taken, weights)
                grown = _canonical((*taken, *kept, *added))
                found.append((1, fragment, dropped, waiting, 1 + len(added), grown))
            if choices:
                break
    return min(found, default=None)


def ready_fragment(
    scheme: PartitionScheme, taken: Layout, layout: Layout, weights: ProfileWeights
) -> float:
    """What the workload would find cut and free on a card of ``layout`` whose instances
    ``taken`` hold work, in thousandths of a card: the compute not taken less, per profile of
    ``weights``, the compute of its free instances (at most the compute not taken), weighted by
    the profile's probability. Unlike :func:`card_fragment`, free slices not cut count for no
    profile: a task finding no free instance of its profile costs a re-cut. ``taken`` must be in
    ``layout``."""
    compute_of = {p.name: p.compute for p in scheme.profiles}
    idle = scheme.compute_slices - sum(compute_of[name] for name, _ in taken)
    left = list(layout)
    for instance in taken:
        left.remove(instance)
    usable = sum(
        w * min(idle, sum(compute_of[name] for name, _ in left if name == profile))
        for profile, w in weights
    )
    return round((idle - usable) * 1000.0 / scheme.compute_slices, 9)


@lru_cache(maxsize=16_384)
def _fill(
    scheme: PartitionScheme, base: Layout, taken: Layout, weights: ProfileWeights
) -> tuple[float, tuple[Instance, ...]]:
    """The instances of the workload's profiles to cut in the free slices of ``base`` (valid,
    canonical; ``taken`` its instances holding work) that leave the least
    :func:`ready_fragment`, the fewest of them on a tie: a later task then finds its instance
    cut, where cutting only the one asked would cost it a re-cut. Every way to add instances is
    tried (a card has a few hundred layouts)."""
    candidates = [
        (name, start)
        for name, _ in weights
        for start in (_profile_starts(scheme, name) if scheme.positional else (None,))
    ]
    best: tuple[float, int, tuple[Instance, ...]] | None = None

    def grow(added: tuple[Instance, ...], first: int) -> None:
        nonlocal best
        key = (ready_fragment(scheme, taken, (*base, *added), weights), len(added), added)
        if best is None or key < best:
            best = key
        for i in range(first, len(candidates)):
            grown = (*added, candidates[i])
            if layout_problem(scheme, (*base, *grown)) is None:
                grow(grown, i if not scheme.positional else i + 1)

    grow((), 0)
    assert best is not None
    return best[0], best[2]


def _profile_starts(scheme: PartitionScheme, name: str) -> tuple[int | None, ...]:
    p = scheme.profile(name)
    assert p is not None
    return p.starts


def _starts(scheme: PartitionScheme, held: Layout, profile: str) -> tuple[int | None, ...]:
    """Where the new instance may go once every free instance is destroyed."""
    p = scheme.profile(profile)
    assert p is not None
    starts: tuple[int | None, ...] = p.starts if scheme.positional else (None,)
    return tuple(s for s in starts if layout_problem(scheme, (*held, (profile, s))) is None)


def _kept(
    scheme: PartitionScheme,
    taken: Layout,
    free: list[Instance],
    dropped: int,
) -> list[tuple[Instance, ...]]:
    """Each choice of the free instances kept when ``dropped`` of them are destroyed to make room
    for the instances ``taken`` (the busy ones and the new one); empty when none is valid."""
    found: list[tuple[Instance, ...]] = []
    for gone in itertools.combinations(range(len(free)), dropped):
        kept = tuple(x for i, x in enumerate(free) if i not in gone)
        if layout_problem(scheme, (*taken, *kept)) is None:
            found.append(kept)
    return found
