"""Which layouts of partitions a card allows, and what its free slices can still hold.

A layout is the instances cut on one card, each a profile name and, for MIG, the first memory
slice it occupies (``("3g.40gb", 4)``); vNPU instances have no position (``None``). A layout is
valid when every instance starts where its profile may (the vendor's placement table), no two
MIG instances share a memory slice, the instances' compute (and, for vNPU, memory and AI CPUs)
fit the card's totals, no profile exceeds its instance limit and at most one ``+me`` profile is
cut. These are the rules the static placement checks cards against and the re-cut step will
search over; memory slices are bits of an int, so a check is a few integer operations.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from functools import cache

from xpupool.catalog.partitions import PartitionProfile, PartitionScheme

Instance = tuple[str, int | None]  # (profile name, first memory slice; None for vNPU)
Layout = tuple[Instance, ...]


def _mask(profile: PartitionProfile, start: int) -> int:
    return ((1 << profile.memory_slices) - 1) << start


def layout_problem(scheme: PartitionScheme, layout: Iterable[Instance]) -> str | None:
    """Why ``layout`` cannot be cut on a card of ``scheme``, or None when it can."""
    used_mask = compute = memory = aicpu = media = 0
    counts: Counter[str] = Counter()
    for name, start in layout:
        profile = scheme.profile(name)
        if profile is None:
            return f"no profile {name!r}; known: {', '.join(scheme.profile_names)}"
        counts[name] += 1
        if profile.max_instances is not None and counts[name] > profile.max_instances:
            return f"more than {profile.max_instances} instances of {name}"
        media += profile.media
        if media > 1:
            return "more than one media-extension (+me) instance"
        compute += profile.compute
        memory += profile.memory_mib
        aicpu += profile.aicpu
        if scheme.positional:
            if start not in profile.starts:
                return f"{name} cannot start at slice {start}; starts: {list(profile.starts)}"
            mask = _mask(profile, start)
            if used_mask & mask:
                return f"{name} at slice {start} overlaps another instance"
            used_mask |= mask
        elif start is not None:
            return f"{name} has no placement; give no start"
    if compute > scheme.compute_slices:
        return f"compute {compute} is more than the card's {scheme.compute_slices}"
    if not scheme.positional and memory > scheme.memory_mib:
        return f"memory {memory} MiB is more than the card's {scheme.memory_mib} MiB"
    if scheme.aicpu and aicpu > scheme.aicpu:
        return f"AI CPUs {aicpu} are more than the card's {scheme.aicpu}"
    return None


def placements_for(scheme: PartitionScheme, layout: Layout, name: str) -> tuple[int | None, ...]:
    """Where one more instance of profile ``name`` can be cut on a card already holding
    ``layout`` (assumed valid): the free starts, in order (vNPU: ``(None,)`` when it fits);
    empty when it cannot."""
    profile = scheme.profile(name)
    if profile is None:
        return ()
    starts: tuple[int | None, ...] = profile.starts if scheme.positional else (None,)
    return tuple(s for s in starts if layout_problem(scheme, (*layout, (name, s))) is None)


def room_for(scheme: PartitionScheme, layout: Layout) -> dict[str, int]:
    """How many more instances of each profile, alone, a card holding ``layout`` could take.

    Same-sized MIG placements never straddle one another's starts unevenly, so taking the
    earliest free start each time is as good as any choice (interval scheduling on aligned
    intervals); property-tested against exhaustive search on every scheme.
    """
    out: dict[str, int] = {}
    for profile in scheme.profiles:
        current = tuple(layout)
        added = 0
        while True:
            free = placements_for(scheme, current, profile.name)
            if not free:
                break
            current = (*current, (profile.name, free[0]))
            added += 1
        out[profile.name] = added
    return out


@cache
def valid_layouts(scheme: PartitionScheme) -> tuple[Layout, ...]:
    """Every valid layout of ``scheme`` (the empty one included), each sorted, in sorted order.

    Grown depth-first from the empty layout by adding instances in canonical order (profile
    index, then start), so each layout appears once. MIG schemes have a few hundred; vNPU
    schemes are multisets bounded by the totals.
    """
    order = {p.name: i for i, p in enumerate(scheme.profiles)}
    candidates: list[Instance] = []
    for profile in scheme.profiles:
        if scheme.positional:
            candidates.extend((profile.name, s) for s in profile.starts)
        else:
            candidates.append((profile.name, None))

    def key(instance: Instance) -> tuple[int, int]:
        return (order[instance[0]], -1 if instance[1] is None else instance[1])

    found: list[Layout] = []

    def grow(layout: Layout, first: int) -> None:
        found.append(layout)
        for i in range(first, len(candidates)):
            grown = (*layout, candidates[i])
            if layout_problem(scheme, grown) is None:
                # vNPU instances repeat (same candidate again); MIG placements never do
                grow(grown, i if not scheme.positional else i + 1)

    grow((), 0)
    return tuple(
        sorted((tuple(sorted(x, key=key)) for x in found), key=lambda x: [key(i) for i in x])
    )
