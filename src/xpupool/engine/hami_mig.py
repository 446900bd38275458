"""HAMi v2.10's dynamic-MIG placement rule, ported, so the partition study can run it as a baseline.

Read at Project-HAMi/HAMi commit 4707fb02c91c545bc7343ce26dba4c32919f9a3e (issue 53's commit):
``pkg/device/nvidia/mig_topology.go`` (``orderedMigPlacements``, ``selectMigPlacement``,
``canPlaceMigProfiles``), ``pkg/device/nvidia/device.go`` (``Fit``, ``CustomFilterRule``,
``selectMigCandidate``, ``AddResourceUsage``), ``pkg/scheduler/score.go`` (``fitInDevices``),
``pkg/scheduler/policy/gpu_policy.go`` (``Less``, ``ComputeScore``), the chart's
``migProfileAllowlist`` (``charts/hami/templates/scheduler/device-configmap.yaml``) and the device
plugin (``pkg/device-plugin/nvidiadevice/nvinternal/plugin/register.go`` ``discoverMigProfiles``,
``migmgr.go`` ``Release``, ``ResetIdleGPUs``). ``mig_profiles.go`` holds only the allowlist's
validation; ``mig_preference.go``, which issue 53 names, exists at no commit of the snapshot.

HAMi cuts MIG instances on demand: a pod asks for memory (``nvidia.com/gpumem``), not a profile;
the scheduler walks the node's cards least used first (the chart's default ``spread``), and on the
first card that passes its checks takes the smallest-memory allowlisted profile (then fewest
slices) with a start free of the card's running instances: ``1g.`` and ``3g.`` profiles from the
highest start down, the others from the lowest up (the "topology-aware" order). The device plugin
creates exactly that instance and destroys it when the pod ends, so a card under HAMi holds its
running instances and nothing else. The backtracking (``canPlaceMigProfiles``: can a set of
profiles all still be placed) is ported as :func:`can_place`; at this commit only HAMi's tests
call it, the scheduler places one instance at a time.

Where HAMi's notion differs from the catalog's (``catalog.partition_geometry``):

- profile names: HAMi maps a name to NVML's GPU-instance profile by its ``Ng`` prefix alone, so it
  can cut one profile per slice count, never ``+me`` nor ``1g.20gb``-style doubles; the chart lists
  the 1g, 2g, 3g and whole-card profiles per model. :func:`hami_profiles` takes exactly those from
  the scheme, and a request for a profile outside them is served as HAMi serves its memory (a
  ``4g.40gb`` ask gets a ``3g.40gb``, a ``1g.10gb`` ask on an A100-40GB a ``2g.10gb``); a ``+me``
  ask is not served (None): HAMi cannot cut a media extension.
- sizes: NVML reports each profile's memory (MB), its share of the card's multiprocessors and its
  placements; here memory is the catalog's nominal size, the card's memory that of its whole-card
  profile, a profile's cores ``ceil(100 x compute / compute_slices)`` and the placements the
  catalog's starts and memory slices (on the A100 these are the numbers in HAMi's own tests).
  They enter only the card order and HAMi's capacity checks.
- scope: one node (``cards``, in device index order), one device per request, no quota, NUMA or
  topology-aware GPU policy. Go's ``sort.Sort`` is an insertion sort, stable, on up to 12 cards;
  a stable sort here is exact for such nodes, while Go may order equal scores otherwise on larger.
- HAMi checks only that placements do not overlap; on every MIG scheme of the catalog that
  implies a valid layout, which the unit tests check over random layouts.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from xpupool.catalog.partition_geometry import Instance, Layout
from xpupool.catalog.partitions import PartitionProfile, PartitionScheme

Placement = tuple[int, int]  # (start, size) in memory slices: NVML's GpuInstancePlacement

_WEIGHT = np.float32(10)  # pkg/util/types.go: Weight
_TOTAL_CORES = 100  # register.go: a card in MIG mode registers devcore 100
_PREFIX_ORDER = (1, 2, 3)  # the chart's allowlist: 1g, 2g, 3g and the whole card


def _prefers_high_start(profile: str) -> bool:
    return profile.startswith(("1g.", "3g."))


def ordered_placements(profile: str, placements: Sequence[Placement]) -> list[Placement]:
    """``orderedMigPlacements``: ``1g.``/``3g.`` profiles try the highest start first, the others
    the lowest (HAMi's test calls the result balanced packing: 3g at 4, 2g at 0, 1g at 3 then 2);
    equal starts keep their order (``sort.SliceStable``)."""
    high = _prefers_high_start(profile)
    return sorted(placements, key=lambda p: -p[0] if high else p[0])


def _overlaps(a: Placement, b: Placement) -> bool:
    return a[0] < b[0] + b[1] and b[0] < a[0] + a[1]


def _free_placements(
    profile: str, placements: Sequence[Placement], used: Sequence[Placement]
) -> list[Placement]:
    return [
        c for c in ordered_placements(profile, placements) if not any(_overlaps(c, u) for u in used)
    ]


def select_placement(
    table: Mapping[str, Sequence[Placement]], occupied: Sequence[Placement], profile: str
) -> Placement | None:
    """``selectMigPlacement``: the first of ``profile``'s placements, in HAMi's order, that
    overlaps no ``occupied`` one; None when none is free or ``table`` lacks the profile."""
    placements = table.get(profile)
    if placements is None:
        return None
    free = _free_placements(profile, placements, occupied)
    return free[0] if free else None


def can_place(
    table: Mapping[str, Sequence[Placement]],
    occupied: Sequence[Placement],
    requested: Sequence[str],
) -> bool:
    """``canPlaceMigProfiles``: can every ``requested`` profile get a placement overlapping
    neither ``occupied`` nor the others'? The profiles with fewest placements go first (then the
    largest first placement), each tried in HAMi's start order, backtracking on failure."""
    ordered = sorted(
        requested,
        key=lambda n: (len(table.get(n, ())), -table[n][0][1] if table.get(n) else 0),
    )
    used = list(occupied)

    def place(index: int) -> bool:
        if index == len(ordered):
            return True
        name = ordered[index]
        for candidate in _free_placements(name, table.get(name, ()), used):
            used.append(candidate)
            if place(index + 1):
                return True
            used.pop()
        return False

    return place(0)


def hami_profiles(scheme: PartitionScheme) -> tuple[PartitionProfile, ...]:
    """The profiles HAMi's chart lets its scheduler cut on a card of ``scheme``: per compute count
    1, 2, 3 and the whole card, the plain profile (no ``+me``, the fewest memory slices), in that
    order, as ``migProfileAllowlist`` lists them for every model it names."""
    out: list[PartitionProfile] = []
    for compute in sorted({*_PREFIX_ORDER, scheme.compute_slices}):
        plain = [p for p in scheme.profiles if p.compute == compute and not p.media]
        if plain:
            out.append(min(plain, key=lambda p: (p.memory_slices, p.memory_mib)))
    return tuple(out)


def hami_cores(scheme: PartitionScheme, profile: PartitionProfile) -> int:
    """The cores, in percent of the card, HAMi charges an instance of ``profile``
    (``MigProfile.Core``: its share of the card's multiprocessors, rounded up), here from its
    share of the compute slices."""
    return math.ceil(_TOTAL_CORES * profile.compute / scheme.compute_slices)


@dataclass(frozen=True, slots=True)
class _Card:
    """One card as HAMi's ``DeviceUsage`` sees it: its running instances only."""

    kept: Layout
    used: int
    used_cores: int
    used_mib: int
    occupied: tuple[Placement, ...]


def _card(scheme: PartitionScheme, index: int, layout: Layout, busy: frozenset[Instance]) -> _Card:
    stray = busy.difference(layout)
    if stray:
        raise ValueError(f"cards[{index}]: busy instances {sorted(stray)} are not in its layout")
    kept = tuple(i for i in layout if i in busy)
    profiles: list[PartitionProfile] = []
    for name, _ in kept:
        profile = scheme.profile(name)
        if profile is None:
            raise ValueError(f"cards[{index}]: no profile {name!r} in {scheme.profile_names}")
        profiles.append(profile)
    occupied = tuple(
        (start or 0, p.memory_slices) for (_, start), p in zip(kept, profiles, strict=True)
    )
    return _Card(
        kept,
        len(kept),
        sum(hami_cores(scheme, p) for p in profiles),
        sum(p.memory_mib for p in profiles),
        occupied,
    )


def _spread_score(card: _Card, count: int, total_mib: int) -> np.float32:
    """``ComputeScore`` with the default weights, in float32 as Go computes it. The pod's own
    request adds nothing: it is counted only where ``container.Type`` equals the card's type,
    and a MIG card registers ``NVIDIA-<model>`` while the request's type is ``NVIDIA``
    (scheduler.go: ``DeviceUsage.Type`` is the registered type)."""
    f = np.float32
    slots = f(card.used) / f(count)
    cores = f(card.used_cores) / f(_TOTAL_CORES)
    memory = f(card.used_mib) / f(total_mib)
    return np.float32(_WEIGHT * (f(1) * slots + f(1) * cores + f(1) * memory))


def hami_mig_choice(
    scheme: PartitionScheme, cards: Sequence[tuple[Layout, frozenset[Instance]]], profile: str
) -> tuple[int, Layout] | None:
    """The card HAMi v2.10 would cut an instance for ``profile``'s memory on, and that card's
    layout afterwards: its busy instances (its free ones dropped, as HAMi keeps no idle
    instance) plus the new one; None when no card passes. ``cards[i]``: card i's layout and which
    of its instances hold work. Deterministic. Raises ValueError when ``scheme`` is not MIG, lacks
    ``profile``, or a card's busy instances are not in its layout or name unknown profiles."""
    if not scheme.positional:
        raise ValueError(f"HAMi's MIG rule needs a MIG scheme, not {scheme.kind}")
    asked = scheme.profile(profile)
    if asked is None:
        raise ValueError(f"no profile {profile!r}; known: {', '.join(scheme.profile_names)}")
    if asked.media:
        return None
    offered = hami_profiles(scheme)
    table = {p.name: [(s, p.memory_slices) for s in p.starts] for p in offered}
    # selectMigCandidate: by memory, then slices, stable over the allowlist's order
    candidates = [
        p
        for p in sorted(offered, key=lambda p: (p.memory_mib, p.compute))
        if p.memory_mib >= asked.memory_mib
    ]
    count = max(p.max_instances or 0 for p in offered)  # register.go: the largest InstanceCount
    total_mib = max(p.memory_mib for p in scheme.profiles)
    state = [_card(scheme, i, layout, busy) for i, (layout, busy) in enumerate(cards)]
    scores = [_spread_score(c, count, total_mib) for c in state]
    # spread sorts by score, highest first (stable on a node of up to 12 cards); Fit walks the
    # sorted list from its end, so the least used card comes first and ties take the last index
    order = sorted(range(len(state)), key=lambda i: -scores[i])
    for index in reversed(order):
        card = state[index]
        if count <= card.used or total_mib - card.used_mib < asked.memory_mib:
            continue
        if card.used_cores >= _TOTAL_CORES:  # no cores left, and the request asks for none
            continue
        for candidate in candidates:
            placement = select_placement(table, card.occupied, candidate.name)
            if placement is not None:
                return index, (*card.kept, (candidate.name, placement[0]))
    return None
