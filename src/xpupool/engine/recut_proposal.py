"""The re-cut proposed for a partition request that fits nowhere: which cards, cut how.

Placement never changes a card's layout: a request for a hardware partition (``mig=3g.40gb``, or
isolated memory) that no free instance holds is refused like any other. A front that may re-cut
cards then asks here which cards to cut and into what, and carries the answer out its own way
(the partition study rebuilds its simulated nodes through the engine host; the plane asks the
node's agent through its one re-cut operation, as the scheduling cycle proposes:
``engine/cycle/recutting.py``) before placing the request again.
The choice of card and layout is a rule with one signature (``partition_recut.recut_choice``,
xpupool's; ``hami_mig.hami_mig_choice``, HAMi v2.10's); this step only says which cards the rule
may choose among: those of a scheme that has the profile, on nodes where the CPU and memory of
every replica put there fit now, all on one node for a replica of several devices. An answer without a free
instance of the asked profile (HAMi's rule picks by memory, and may cut a ``3g.40gb`` for a
``4g.40gb``) is not proposed: the request would not take it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from xpupool.catalog.partition_geometry import Instance, Layout
from xpupool.catalog.partitions import PartitionScheme
from xpupool.engine.engine import Engine
from xpupool.engine.state import BoolArray
from xpupool.model.request import DeviceRequest, Request

__all__ = ["PartitionCard", "Recut", "RecutRule", "propose_recut"]

RecutRule = Callable[
    [PartitionScheme, Sequence[tuple[Layout, frozenset[Instance]]], str],
    tuple[int, Layout] | None,
]
"""A rule choosing the card (an index into the cards given) and its whole new layout for one more
instance of a profile, or None: ``hami_mig_choice``, or ``recut_choice`` with its workload bound."""


@dataclass(frozen=True, slots=True)
class PartitionCard:
    """A card in partition mode as the front knows it: where it is, its scheme, its layout,
    which of its instances hold work, and whether the front lets no re-cut change it now though
    one may later (``resting``: its last re-cuts failed and the front waits before the next)."""

    node: str
    uuid: str
    scheme: PartitionScheme
    layout: Layout
    busy: frozenset[Instance] = frozenset()
    resting: bool = False
    # the device UUID of each instance of ``layout``, in its order (empty: not given, and the
    # cycle then never preempts work on the card for a re-cut: ``recutting.recut_victims``)
    uuids: tuple[str, ...] = ()
    # the instances of ``busy`` the front keeps only until its minimum idle time has passed
    # (free then, unlike held, cordoned or unhealthy ones): ``recutting.recut_victims`` stops
    # nobody more while a re-cut of these will serve
    ripening: frozenset[Instance] = frozenset()


@dataclass(frozen=True, slots=True)
class Recut:
    """Cut card ``uuid`` of ``node`` from ``before`` to ``layout`` (whole layouts)."""

    node: str
    uuid: str
    before: Layout
    layout: Layout

    @property
    def destroyed(self) -> int:
        """Instances of ``before`` that ``layout`` no longer has."""
        left = list(self.layout)
        gone = 0
        for instance in self.before:
            if instance in left:
                left.remove(instance)
            else:
                gone += 1
        return gone


def propose_recut(
    engine: Engine, cards: Sequence[PartitionCard], req: Request, rule: RecutRule
) -> tuple[Recut, ...]:
    """The re-cuts after which every replica of ``req`` has free instances to take (a gang, or
    any job of several replicas, runs whole: room for some members only is no room): one card
    per replica of one device, ``req.devices.count`` cards of one node otherwise (the first
    node, in the order of ``cards``, where the rule finds them all), each replica's instances
    taken as busy before the next is looked for; empty when the rule falls short for a replica
    or ``req`` asks for no partition; a ``resting`` card is never chosen, nor a card of a node
    without the CPU and memory of one more replica than the proposal puts there already. A card whose free
    instances of the profile serve is answered with its layout unchanged, and left out of the
    result (all unchanged: placement failed for another reason). Changes nothing."""
    d = req.devices
    if d.count < 1 or (d.partition is None and d.isolated_mib is None):
        return ()
    room = _HostRoom(engine, req)
    usable = [c for c in cards if room.holds(c.node, 1) and not c.resting]
    current = list(usable)
    placed: dict[str, int] = {}
    for _ in range(req.replicas):
        # only cards of nodes with CPU and memory for one more replica than put there already
        at = [i for i, c in enumerate(current) if room.holds(c.node, placed.get(c.node, 0) + 1)]
        trial = [current[i] for i in at]
        node = _replica(trial, _by_scheme(trial), d, rule)
        if node is None:
            return ()
        for i, card in zip(at, trial, strict=True):
            current[i] = card
        placed[node] = placed.get(node, 0) + 1
    return tuple(
        Recut(c.node, c.uuid, c.layout, n.layout)
        for c, n in zip(usable, current, strict=True)
        if sorted(c.layout) != sorted(n.layout)
    )


class _HostRoom:
    """Whether a node has the CPU and memory of ``k`` replicas of ``req`` now: the engine's
    filters asked once per ``k`` for ``k`` times the CPU and memory and no device. A proposal
    putting two replicas on a node with room for one is a re-cut nobody can use."""

    def __init__(self, engine: Engine, req: Request) -> None:
        self._engine = engine
        self._req = req
        self._masks: dict[int, BoolArray] = {}

    def holds(self, node: str, k: int) -> bool:
        mask = self._masks.get(k)
        if mask is None:
            r = self._req
            alone = replace(
                r,
                cpu_milli=r.cpu_milli * k,
                memory_mib=r.memory_mib * k,
                devices=DeviceRequest(),
                replicas=1,
            )
            mask = self._masks[k] = self._engine.feasible(alone).node_fit
        i = self._engine.node_index(node)
        return i is not None and bool(mask[i])


def _replica(
    current: list[PartitionCard], groups: list[list[int]], d: DeviceRequest, rule: RecutRule
) -> str | None:
    """One replica's ``d.count`` instances found on ``current`` (one card, or cards of one
    node) and taken as cut, busy, in ``current``: the node they are on; None when the rule
    falls short."""
    if d.count == 1:
        took = _take(current, groups, d, rule)
        return None if took is None else current[took].node
    for node in dict.fromkeys(c.node for c in current):
        at = [i for i, c in enumerate(current) if c.node == node]
        trial = [current[i] for i in at]
        if all(_take(trial, _by_scheme(trial), d, rule) is not None for _ in range(d.count)):
            for i, card in zip(at, trial, strict=True):
                current[i] = card
            return node
    return None


def _by_scheme(cards: Sequence[PartitionCard]) -> list[list[int]]:
    """Indexes of ``cards`` per geometry, in the order each first comes: schemes that cut alike
    (an A100-80GB and an H100-80GB have the same profiles and slices) are one group, so the rule
    weighs all their cards together. Schemes are told apart by identity first (a scheme's hash
    goes over all its profiles; a pool has a handful of schemes)."""
    geometry: dict[int, object] = {}
    groups: dict[object, list[int]] = {}
    for i, card in enumerate(cards):
        key = geometry.get(id(card.scheme))
        if key is None:
            s = card.scheme
            key = geometry[id(s)] = (
                s.kind,
                s.compute_slices,
                s.memory_slices,
                s.memory_mib,
                s.aicpu,
                s.profiles,
            )
        groups.setdefault(key, []).append(i)
    return list(groups.values())


def _profile(scheme: PartitionScheme, d: DeviceRequest) -> str | None:
    if d.partition is not None:
        return d.partition if scheme.profile(d.partition) is not None else None
    assert d.isolated_mib is not None
    smallest = scheme.smallest_holding(d.isolated_mib)
    return None if smallest is None else smallest.name


def _take(
    current: list[PartitionCard], groups: list[list[int]], d: DeviceRequest, rule: RecutRule
) -> int | None:
    """One instance: the rule's first answer over each geometry's cards taken as cut (its new
    layout in ``current``, its free instance of the profile then busy): the index of its card;
    None when none."""
    found = _ask(current, groups, d, rule)
    if found is None:
        return None
    at, layout, new = found
    current[at] = replace(current[at], layout=layout, busy=current[at].busy | {new})
    return at


def _ask(
    cards: list[PartitionCard], groups: list[list[int]], d: DeviceRequest, rule: RecutRule
) -> tuple[int, Layout, Instance] | None:
    """The rule asked over each group of ``cards`` in turn: the first answer as (index into
    ``cards``, new layout, the free instance of the profile it has); None when no group's
    answer has one (an answer cutting another profile ends the search: the rule chose it)."""
    for group in groups:
        scheme = cards[group[0]].scheme
        profile = _profile(scheme, d)
        if profile is None:
            continue
        answer = rule(scheme, [(cards[i].layout, cards[i].busy) for i in group], profile)
        if answer is not None:
            at = group[answer[0]]
            new = _free_of(answer[1], cards[at].busy, profile)
            return None if new is None else (at, answer[1], new)
    return None


def _free_of(layout: Layout, busy: frozenset[Instance], profile: str) -> Instance | None:
    """A free instance of ``profile`` in ``layout``; None when the rule's answer has none."""
    return next((i for i in layout if i[0] == profile and i not in busy), None)
