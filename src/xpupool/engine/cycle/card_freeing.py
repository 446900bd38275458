"""Which sets of running jobs, moved off one node, free there the cards a pending replica needs.

The defragmentation planner (``defrag.py``) asks this before any what-if. A card is free for a
replica's device only when its free compute (and memory, for a request in MiB) reaches the
replica's need per device; for a device taken whole that means *every* share on the card has left,
so a card holding three fractional tasks is freed by moving all three, never by one of them. A
node can take the replica only when at least ``count`` of its cards are (or can be made) free, so
the sets worth trying are unions, over ``count`` minus the cards free now, of one way of freeing
each card (its minimal sets of shares), and every set of moves that lets the replica land on the
node contains one of them: a necessary condition, so a search that tries only these (and their
supersets) still finds the fewest moves. Node CPU, memory and card selectors are not weighed here
(looser, still necessary): the what-if decides.

Bounds (so a node with many tiny shares costs little): at most :data:`OPTIONS_PER_CARD` ways to
free one card, cards chosen among the cheapest few when the node has more than
:data:`CARD_SETS` ways to pick them, and at most :data:`SETS_PER_NODE` sets per node. On a node
of 8 cards every way of picking cards is tried (70 at most), so a node is found emptiable whenever
it is, within the move limit. Reads the state, changes nothing.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence

from xpupool.engine.capacity import cores_fit, memory_fits
from xpupool.engine.state import ClusterState
from xpupool.model.allocation import Allocation
from xpupool.model.request import DeviceRequest

OPTIONS_PER_CARD = 16
"""Ways (minimal sets of its shares) to free one card looked at."""
CARD_SETS = 500
"""Ways to pick the cards to free on one node looked at (all of them on a node of 8 cards)."""
SETS_PER_NODE = 256
"""Sets of moves one node contributes."""
LOOK_PER_NODE = 8192
"""Ways to free the cards (one way per card picked) looked at on one node."""
LOOK_PER_CARD = 4096
"""Sets of one card's shares looked at for its ways to be freed."""

Frees = Callable[[int, int], bool]
"""Whether freeing (core permille, MiB) on a card lets a device of the request take it."""


def freeing_sets(
    state: ClusterState,
    devices: DeviceRequest,
    node: int,
    holders: Mapping[int, Sequence[Allocation]],
    max_size: int,
) -> list[frozenset[int]]:
    """The sets of ``holders`` (job id: its allocations) of at most ``max_size`` jobs whose moving
    frees on ``node`` the cards one replica of ``devices`` needs, fewest jobs first (then job
    ids); [] when none does. When the node has the cards already (the replica fails there for
    something else: CPU, memory, topology), any one job there is a set."""
    width = state.width
    base = node * width
    core_free = state.dev_core_free[node]
    mem_free = state.dev_mem_free[node]
    need_core = devices.need_core_permille
    need_mib = devices.memory_mib
    on_card: dict[int, dict[int, tuple[int, int]]] = {}  # card column: job: (core, MiB) there
    for job, allocations in holders.items():
        for alloc in allocations:
            if alloc.node_index != node:
                continue
            for share in alloc.devices:
                here = on_card.setdefault(share.slot - base, {})
                core, mib = here.get(job, (0, 0))
                here[job] = (core + share.core_permille, mib + share.memory_mib)

    def short(col: int, core: int, mib: int) -> bool:
        """Card ``col`` still falls short of one device's need with ``core``/``mib`` freed."""
        if not cores_fit(int(core_free[col]) + core, need_core):
            return True
        return need_mib is not None and not memory_fits(int(mem_free[col]) + mib, need_mib)

    def frees_on(col: int) -> Frees:
        return lambda core, mib: not short(col, core, mib)

    cards = [int(c) for c in state.dev_usable[node].nonzero()[0]]
    deficit = devices.count - sum(not short(c, 0, 0) for c in cards)
    if deficit <= 0:
        jobs = sorted({j for here in on_card.values() for j in here})
        return [frozenset((j,)) for j in jobs] if max_size >= 1 else []
    options: dict[int, list[frozenset[int]]] = {}
    for col in cards:
        if short(col, 0, 0) and col in on_card:
            ways = _ways_to_free(on_card[col], frees_on(col))
            ways = [w for w in ways if len(w) <= max_size]
            if ways:
                options[col] = ways
    if len(options) < deficit:
        return []
    chosen = sorted(options, key=lambda c: (min(len(w) for w in options[c]), c))
    keep = len(chosen)
    while keep > deficit and math.comb(keep, deficit) > CARD_SETS:
        keep -= 1
    found: set[frozenset[int]] = set()
    picks = itertools.combinations(chosen[:keep], deficit)
    unions = (
        frozenset().union(*ways)
        for picked in picks
        for ways in itertools.product(*(options[c] for c in picked))
    )
    for union in itertools.islice(unions, LOOK_PER_NODE):
        if len(union) <= max_size:
            found.add(union)
            if len(found) >= SETS_PER_NODE:
                break
    return sorted(found, key=lambda s: (len(s), sorted(s)))


def _ways_to_free(shares: Mapping[int, tuple[int, int]], frees: Frees) -> list[frozenset[int]]:
    """The minimal sets of the jobs in ``shares`` (job: its (core, MiB) on the card) whose leaving
    ``frees`` the card, smallest first, at most :data:`OPTIONS_PER_CARD`. A size is skipped when
    even its largest shares fall short (a card taken whole: only all of them free it)."""
    jobs = sorted(shares)
    by_core = sorted((shares[j][0] for j in jobs), reverse=True)
    by_mib = sorted((shares[j][1] for j in jobs), reverse=True)
    ways: list[frozenset[int]] = []
    looked = 0
    for size in range(1, len(jobs) + 1):
        if not frees(sum(by_core[:size]), sum(by_mib[:size])):
            continue  # no set of this size frees it
        for combo in itertools.combinations(jobs, size):
            looked += 1
            if looked > LOOK_PER_CARD:
                return ways
            chosen = frozenset(combo)
            if any(w <= chosen for w in ways):
                continue  # not minimal
            if frees(sum(shares[j][0] for j in combo), sum(shares[j][1] for j in combo)):
                ways.append(chosen)
                if len(ways) >= OPTIONS_PER_CARD:
                    return ways
    return ways
