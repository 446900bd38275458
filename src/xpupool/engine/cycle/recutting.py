"""The cycle's re-cut: a partition request that fits nowhere waits for a card to be re-cut for it.

A request for a hardware partition (``mig=3g.40gb``, or isolated memory) whose profile is free on
no card would wait for ever when the pool's cards are cut into other profiles. When the front
lets it (a :class:`RecutOffer`: which cards it may re-cut now, and the rule choosing among
them), the cycle asks ``recut_proposal.propose_recut`` for the cards to cut and returns a
:class:`Recutting` decision: the front carries the re-cuts out its own way (the plane through
``server/plane/card_recut.py``, its one re-cut operation) and the job stays pending until the
new instances are there, when the next pass places it like any other. Re-cutting frees room
without stopping anyone, so the cycle asks for it before it preempts. The offer keeps each card
to at most one re-cut in flight and a job to the re-cuts already asked for it: a job whose
re-cut is in flight is answered with those (:attr:`Recutting.new` False), never another card.
The offer marks busy every instance a re-cut must keep (held by work, or idle for less than the
front's minimum), and the rule keeps busy instances exactly. When no re-cut of free slices serves
and the job's queue preempts lower priorities, :func:`recut_victims` lets the rule cut the slices
of work the job may evict (``eviction.may_evict``) as if free: the jobs on the instances such a
re-cut destroys are stopped through the cycle's one preemption decision
(``Preempt``, ``PreemptingLowerPriority``, with the instances the re-cut destroys in
``recut_freed``: the front does not hold those for its minimum idle time), and once they are
free a later pass asks the re-cut like any other.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from xpupool.catalog.partition_cards import layout_words
from xpupool.engine.cycle.eviction import may_evict
from xpupool.engine.cycle.work import PendingWork, RunningWork
from xpupool.engine.engine import Engine
from xpupool.engine.outcomes import RecuttingCards, Refused
from xpupool.engine.recut_proposal import PartitionCard, Recut, RecutRule, propose_recut
from xpupool.model.request import Request

__all__ = [
    "RecutOffer",
    "Recutting",
    "asks_partition",
    "recut_victims",
    "recuttable",
    "recutting",
]


class RecutOffer(Protocol):
    """What a front lets the cycle re-cut, asked only for a partition request that fits nowhere
    now (so a pool without partitions pays nothing for it)."""

    @property
    def rule(self) -> RecutRule:
        """The rule choosing the card and its new layout (``partition_recut.recut_choice`` with
        the learned workload bound, or HAMi's)."""
        ...

    def in_flight(self, job: int) -> tuple[Recut, ...]:
        """The re-cuts asked earlier for ``job`` and not yet applied or failed."""
        ...

    def cards(self, job: int) -> Sequence[PartitionCard]:
        """The cards a re-cut for ``job`` may change now, in the pool's order: in partition mode,
        on nodes whose pool allows re-cuts, with no re-cut in flight; ``busy`` holds every
        instance a re-cut must keep, and a card the front may re-cut only later is ``resting``."""
        ...


@dataclass(frozen=True, slots=True)
class Recutting:
    """Stays pending while ``recuts`` cut cards for it: asked by this decision when ``new`` (the
    front carries them out), else asked earlier and still in flight."""

    outcome: RecuttingCards
    recuts: tuple[Recut, ...]
    new: bool


def recutting(
    engine: Engine, offer: RecutOffer, job: int, req: Request, cause: Refused
) -> Recutting | bool:
    """The re-cuts ``job`` (asking ``req``, refused for ``cause``) waits for: those in flight
    for it, else the ones ``offer``'s rule proposes over its cards. Otherwise whether a re-cut
    could serve it later (:func:`recuttable` over the offer's cards: its wait is then for room,
    not for ever); False at once when ``req`` asks for no partition. Changes nothing."""
    if not asks_partition(req):
        return False
    asked = offer.in_flight(job)
    if asked:
        return Recutting(_outcome(cause, asked), asked, new=False)
    cards = offer.cards(job)
    found = propose_recut(engine, cards, req, offer.rule)
    if not found:
        return recuttable(cards, req)
    return Recutting(_outcome(cause, found), found, new=True)


def recut_victims(
    engine: Engine,
    offer: RecutOffer,
    job: PendingWork,
    running: Mapping[int, RunningWork],
    spared: Collection[int] = (),
) -> tuple[tuple[RunningWork, ...], frozenset[str]]:
    """The running jobs to stop so that a re-cut serves ``job``'s partition request when none of
    free slices does, and the UUIDs of their instances that re-cut destroys (the front skips
    their minimum idle time: else the requeued victims would take them back first). The cards
    are offered to the rule with the instances held by jobs ``job`` may evict (``uuids``
    matched to ``running``'s allocations) free, those of other work still busy (kept exactly),
    and the holders of the instances the proposed re-cuts destroy are the victims (work on an
    instance a re-cut keeps goes on). Empty when no such re-cut is found,
    when one will serve once instances the front keeps only for a while are free (the victims
    of an earlier decision, idle for less than the front's minimum, ``PartitionCard.ripening``:
    nobody more is stopped; a cordoned or unhealthy instance nobody holds is no such one),
    or when ``job`` asks for no partition. Jobs in ``spared`` are never stopped (inside their
    minimum run time, as :meth:`SchedulingCycle.preemption_victims` spares them). Changes
    nothing."""
    none: tuple[tuple[RunningWork, ...], frozenset[str]] = ((), frozenset())
    if not asks_partition(job.request):
        return none
    holder_of = {u: h for h in running.values() for a in h.allocations for u in a.device_uuids}

    def evictable(h: RunningWork) -> bool:
        guaranteed = any(a.guaranteed for a in h.allocations)
        leaving = bool(h.stopping)
        return h.id not in spared and may_evict(
            h.priority, job.priority, leaving=leaving, guaranteed=guaranteed
        )

    if not any(evictable(h) for h in running.values()):
        return none  # nobody to stop: the offer is not asked again
    cards = offer.cards(job.id)
    if propose_recut(engine, [_ripened(c) for c in cards], job.request, offer.rule):
        return none  # slices only kept idle (victims gone, or others) will serve: wait for them
    opened: list[PartitionCard] = []
    for card in cards:
        freed = frozenset(
            i
            for i, u in zip(card.layout, card.uuids, strict=False)
            if u in holder_of and evictable(holder_of[u])
        )
        opened.append(replace(card, busy=card.busy - freed) if freed else card)
    victims: dict[int, RunningWork] = {}
    destroyed: set[str] = set()
    for recut in propose_recut(engine, opened, job.request, offer.rule):
        card = next(c for c in cards if (c.node, c.uuid) == (recut.node, recut.uuid))
        kept = list(recut.layout)
        for instance, uuid in zip(card.layout, card.uuids, strict=False):
            if instance in kept:
                kept.remove(instance)
            elif uuid in holder_of:
                victims[holder_of[uuid].id] = holder_of[uuid]
                destroyed.add(uuid)
    return tuple(victims.values()), frozenset(destroyed)


def _ripened(card: PartitionCard) -> PartitionCard:
    """``card`` as it will be once the instances the front keeps only for its minimum idle time
    (``ripening``) are free; held, cordoned and unhealthy instances stay busy."""
    return replace(card, busy=card.busy - card.ripening) if card.ripening else card


def asks_partition(req: Request) -> bool:
    """Whether ``req`` asks for hardware partitions (a profile, or isolated memory)."""
    d = req.devices
    return d.count >= 1 and (d.partition is not None or d.isolated_mib is not None)


def recuttable(cards: Sequence[PartitionCard], req: Request) -> bool:
    """Whether some card of ``cards``, cut afresh, has a profile ``req`` takes (by name, or the
    smallest holding its isolated memory): a partition request that no instance can hold now
    may be served by a re-cut once the work on such a card ends."""
    d = req.devices
    if not asks_partition(req):
        return False
    for card in cards:
        if d.partition is not None:
            if card.scheme.profile(d.partition) is not None:
                return True
        elif d.isolated_mib is not None and card.scheme.smallest_holding(d.isolated_mib):
            return True
    return False


def _outcome(cause: Refused, recuts: Sequence[Recut]) -> RecuttingCards:
    cuts = tuple((r.uuid, r.node, tuple(layout_words(r.layout))) for r in recuts)
    return RecuttingCards(cause, cuts)
