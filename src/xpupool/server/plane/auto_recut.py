"""The re-cuts the scheduling cycle proposes, as the plane offers and carries them out (issue 53).

:class:`PlaneRecuts` is the cycle's ``RecutOffer`` for one batch of a scheduling pass: the cards
it may re-cut are the partitioned cards of ready, uncordoned agent nodes whose pool allows
re-cuts (``xpupool/recut`` not ``"false"``), with no re-cut in flight (no wanted layout stored,
read through the batch's own transaction, so a card asked earlier in the batch counts); a card
whose last re-cuts failed is at rest (``recut_backoff.py``): offered ``resting``, never chosen,
and a job it could serve is tried again when the rest ends, its reason saying so (:func:`note`). An
instance a job holds, one idle for less than the minimum (``xpupool up --recut-min-idle``),
and a cordoned or unhealthy one are busy: the rule keeps them, so the plane's one re-cut
operation (``card_recut.recut_in``) takes what the cycle proposes. :func:`carry_out` asks each
re-cut there, for the job, and writes the job's event; the job stays pending, and the pass after
the agent has registered the new instances places it. Which re-cuts were asked for which job is
stored with the wanted layouts (``card_layouts.job``): a restarted plane answers the job with
the re-cuts in flight for it, and neither asks another nor forgets it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from sqlalchemy import Connection, select

from xpupool.catalog import load_accelerators, load_partitions
from xpupool.catalog.partition_cards import read_layout
from xpupool.catalog.partition_geometry import Instance, Layout
from xpupool.catalog.partitions import PartitionScheme
from xpupool.engine.cycle.recutting import Recutting, asks_partition, recuttable
from xpupool.engine.fragmentation import TargetWorkload
from xpupool.engine.partition_recut import recut_choice
from xpupool.engine.recut_proposal import PartitionCard, Recut, RecutRule
from xpupool.model.device import Device
from xpupool.model.errors import XpupoolError
from xpupool.model.request import Request
from xpupool.server.plane.card_recut import RECUT_LABEL, recut_in
from xpupool.server.plane.recut_backoff import Resting
from xpupool.server.schemas.nodes import NodeStatus
from xpupool.server.storage.card_layouts import card_layouts

if TYPE_CHECKING:
    from xpupool.server.plane.control import ControlPlane

log = logging.getLogger("xpupool.scheduler")
__all__ = ["PlaneRecuts", "carry_out", "could_serve", "note", "offered_cards"]

NO_WORKLOAD = TargetWorkload((), ())


class PlaneRecuts:
    """The cycle's re-cut offer over ``plane``'s agent nodes, for one batch written in ``conn``
    (under the plane's lock)."""

    def __init__(self, plane: ControlPlane, conn: Connection) -> None:
        self.plane = plane
        self.conn = conn
        # Unix time the first instance kept only for the minimum idle time may be re-cut, as
        # the last :meth:`cards` found (None: none): a job that waits for it is tried again
        # then, though nothing is released meanwhile (the retry gate waits for a release)
        self.ripe_at: float | None = None
        # the cards at rest after failed re-cuts, as the last :meth:`cards` found them
        self.resting: list[tuple[PartitionCard, Resting]] = []

    def fresh(self) -> None:
        """Forget what the last job's :meth:`cards` found (the pass tries another job)."""
        self.ripe_at = None
        self.resting = []

    @property
    def rule(self) -> RecutRule:
        """xpupool's rule (``partition_recut.recut_choice``) on the engine's learned workload."""
        workload = self.plane.engine.target_workload() or NO_WORKLOAD

        def choose(
            scheme: PartitionScheme,
            cards: Sequence[tuple[Layout, frozenset[Instance]]],
            profile: str,
        ) -> tuple[int, Layout] | None:
            return recut_choice(scheme, cards, profile, workload)

        return choose

    def wanted(self) -> dict[tuple[str, str], Layout]:
        """The wanted layouts stored, by (node, card): the re-cuts in flight, those asked earlier
        in this batch included (read each time: asked only for a partition request that fits
        nowhere)."""
        rows = self.conn.execute(
            select(card_layouts.c.node, card_layouts.c.card, card_layouts.c.layout)
        )
        return {(r.node, r.card): read_layout("layout", r.layout) for r in rows}

    def in_flight(self, job: int) -> tuple[Recut, ...]:
        """The re-cuts asked for ``job`` and still wanted (stored: an applied or failed one, or
        one the admin asked over, has no row for ``job`` any more), by node and card."""
        c = card_layouts.c
        rows = self.conn.execute(
            select(c.node, c.card, c.layout).where(c.job == job).order_by(c.node, c.card)
        )
        plane = self.plane
        return tuple(
            Recut(r.node, r.card, _current(plane, r.node, r.card), read_layout("layout", r.layout))
            for r in rows
        )

    def cards(self, job: int) -> Sequence[PartitionCard]:
        ripe: list[float] = []
        found = offered_cards(self.plane, self.wanted(), ripe)
        backoff, now = self.plane.recut_backoff, self.plane.clock()
        self.resting = []
        for i, card in enumerate(found):
            rest = backoff.resting(card.node, card.uuid, now)
            if rest is not None:
                found[i] = replace(card, resting=True)
                self.resting.append((card, rest))
                ripe.append(rest.until)
        self.ripe_at = min(ripe, default=None)
        return found


def _current(plane: ControlPlane, node: str, card: str) -> Layout:
    """Card ``card`` of ``node`` as its agent last reported it (empty: no such node or card)."""
    rec = plane.node(node)
    if rec is None:
        return ()
    return tuple(
        (d.partition or "", d.partition_start) for d in rec.node.devices if d.partition_of == card
    )


def offered_cards(
    plane: ControlPlane,
    wanted: Mapping[tuple[str, str], Layout],
    ripe: list[float] | None = None,
) -> list[PartitionCard]:
    """The cut cards of ``plane``'s ready, uncordoned agent nodes that allow re-cuts, but those
    with a re-cut in flight (``wanted``, by (node, card)), in the plane's order, with the
    instances a re-cut must keep marked busy (see the module docstring). ``ripe`` gets, per
    instance kept only for the minimum idle time, the Unix time that minimum ends."""
    held = {u for h in plane.held_jobs.values() for a in h.allocations for u in a.device_uuids}
    now, idle = plane.clock(), plane.card_idle
    partitions, catalog = load_partitions(), load_accelerators()
    out: list[PartitionCard] = []
    for name, rec in plane.heard_node_records():
        if (
            rec.source != "agent"
            or rec.status is not NodeStatus.READY
            or rec.cordoned
            or rec.node.labels.get(RECUT_LABEL, "").lower() == "false"
        ):
            continue
        by_card: dict[str, list[Device]] = {}
        for d in rec.node.devices:
            if d.partition_of is not None and (name, d.partition_of) not in wanted:
                by_card.setdefault(d.partition_of, []).append(d)
        for card, instances in by_card.items():
            scheme = partitions.scheme_for(instances[0].model, instances[0].vendor, catalog)
            if scheme is None:
                continue
            kept = [d for d in instances if d.uuid in held or d.uuid in rec.cordoned_devices] + [
                d for d in instances if not d.healthy
            ]
            ripening: list[Device] = []
            for d in instances:
                ends = idle.idle_since(d.uuid) + idle.min_idle_s
                if now < ends and d not in kept:
                    ripening.append(d)
                    if ripe is not None:
                        ripe.append(ends)
            busy = frozenset((d.partition or "", d.partition_start) for d in kept + ripening)
            layout = tuple((d.partition or "", d.partition_start) for d in instances)
            uuids = tuple(d.uuid for d in instances)
            soon = frozenset((d.partition or "", d.partition_start) for d in ripening)
            out.append(PartitionCard(name, card, scheme, layout, busy, uuids=uuids, ripening=soon))
    return out


def could_serve(plane: ControlPlane, req: Request) -> bool:
    """Whether a re-cut of a card the plane may re-cut could ever hold ``req``'s partition: a
    submission no instance can hold now is then not refused as unfittable (it waits for room
    and a re-cut). Under the plane's lock."""
    return asks_partition(req) and recuttable(offered_cards(plane, {}), req)


def note(offer: object, req: Request) -> str:
    """What a pending job's reason adds when cards at rest after failed re-cuts could serve it
    (``offer`` is the batch's :class:`PlaneRecuts`, after the job's decision): ``; re-cuts of
    CARD on NODE failed 2 times in a row (the tool's words): none proposed before TIME UTC``;
    empty otherwise. Stable from pass to pass while the rest lasts (the reason is stored when
    it changes)."""
    if not isinstance(offer, PlaneRecuts):
        return ""
    said = []
    for card, rest in offer.resting:
        if not recuttable([card], req):
            continue
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(rest.until))
        times = "1 time" if rest.failures == 1 else f"{rest.failures} times"
        said.append(
            f"; re-cuts of {card.uuid} on {card.node} failed {times} in a row "
            f"({' '.join(rest.reason.split())[:120]}): none proposed before {when} UTC"
        )
    return "".join(said[:3])


def carry_out(plane: ControlPlane, conn: Connection, job: int, decision: Recutting) -> bool:
    """Ask the re-cuts of a new ``decision`` for ``job`` through the plane's one re-cut
    operation, in ``conn``; False when one was refused (the state moved since the cycle read
    it: what was asked before it stays asked, and the job asks again on a later pass)."""
    asked: list[Recut] = []
    for r in decision.recuts:
        rec = plane.node(r.node)
        try:
            if rec is None:
                raise XpupoolError(f"node {r.node} is gone")
            recut_in(plane, conn, rec, r.uuid, r.layout, f"for job {job}", job)
        except XpupoolError as exc:
            log.info("job %d: re-cut of %s on %s refused: %s", job, r.uuid, r.node, exc)
            break
        asked.append(r)
    return len(asked) == len(decision.recuts)
