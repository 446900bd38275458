"""Re-cutting a partitioned card on an agent node (issue 53): the plane's one operation for it,
whoever asks (the admin's ``PUT /v1/nodes/NODE/cards/UUID/layout``, or the scheduling cycle for
a job through ``auto_recut.py`` and :func:`recut_in`), and what the node's heartbeats do with it.

:func:`recut` checks the wanted layout against the catalog's geometry (422 on ``layout``), then,
under the plane's lock, refuses (409, :class:`RecutRefused` with a code; nothing changed) a card
of a node that is no agent's, of a node pool that forbids re-cuts (``xpupool/recut: "false"``
among the node's labels), or a re-cut that would destroy an instance a job holds or one that has
not been idle for the policy's minimum (``xpupool up --recut-min-idle``). Otherwise it stores the
wanted layout, cordons the instances it destroys (so nothing is placed there meanwhile), and
writes an event and an audit row. Each heartbeat reply of the node carries its wanted layouts
(:func:`orders`); the agent runs the vendor tool and registers its new inventory as for any
change of its cards; the reply that finds the card cut as wanted records it applied. An agent
that reports its tool failed (:func:`failed`) drops the wanted layout, with the tool's words in
the card's events, and puts the card at rest for the scheduling cycle (``recut_backoff.py``: it
proposes no re-cut of the card for a while, doubling per failure in a row); a re-cut applied, or
the admin's ``PUT``, ends the rest; the rest is stored, so it outlasts a restart.

Idle time is counted from the later of the plane's start and the last release of an allocation
on the instance (``card_idle.py``, in memory: after a restart every instance waits the minimum
again, the safe side).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

from sqlalchemy import Connection, RowMapping, delete, insert, select

from xpupool.catalog import load_accelerators, load_partitions
from xpupool.catalog.partition_cards import layout_words, read_layout
from xpupool.catalog.partition_change import layout_change
from xpupool.catalog.partition_geometry import Layout, layout_problem
from xpupool.model.device import Device
from xpupool.model.errors import Conflict, NotFound, RequestError
from xpupool.server.auth import Principal
from xpupool.server.plane import store
from xpupool.server.plane.card_idle import DEFAULT_MIN_IDLE_S as DEFAULT_MIN_IDLE_S
from xpupool.server.plane.records import NodeRecord
from xpupool.server.storage.card_layouts import card_events, card_layouts

if TYPE_CHECKING:
    from xpupool.server.plane.control import ControlPlane

RECUT_LABEL = "xpupool/recut"
"""A node label: ``"false"`` keeps the node's cards as they are cut (its pool forbids re-cuts)."""
EVENTS_SHOWN = 20  # a card's latest events in GET .../layout


class RecutRefusal(StrEnum):
    NOT_AGENT = "not-agent"  # no agent applies it: a cluster-file node
    NOT_ALLOWED = "not-allowed"  # the node's pool forbids re-cuts
    BUSY = "busy"  # an instance it destroys holds a job
    NOT_IDLE = "not-idle"  # an instance it destroys was busy too recently


class RecutRefused(Conflict):
    """A re-cut refused (409), nothing changed; ``code`` says why, ``uuids`` which instances."""

    def __init__(self, code: RecutRefusal, text: str, uuids: Sequence[str] = ()) -> None:
        self.code = code
        self.uuids = tuple(uuids)
        super().__init__(f"{text}. Nothing changed")


@dataclass(frozen=True, slots=True)
class CardEvent:
    at: float
    event: str  # asked | applied | failed
    detail: str


@dataclass(frozen=True, slots=True)
class CardLayout:
    """A card of an agent node as a re-cut sees it: its instances now, the layout wanted (None:
    none), why and when it was asked, and its latest events (newest first)."""

    node: str
    card: str
    model: str
    current: Layout
    busy: Layout  # the instances of ``current`` that jobs hold now
    wanted: Layout | None
    why: str
    asked_at: float | None
    events: tuple[CardEvent, ...]
    job: int | None = None  # the job the scheduling cycle asked the wanted layout for
    failures: int = 0  # failed re-cuts in a row (recut_backoff.py)
    resting_until: float | None = None  # no re-cut proposed by the cycle before (Unix time)


def _card(rec: NodeRecord, card: str) -> tuple[Device, Layout, tuple[Device, ...]]:
    """The card ``card`` of ``rec``: a device standing for it (one of its instances, or the card
    itself while uncut), its layout now, and the devices a re-cut may destroy. NotFound when the
    node has no such card."""
    instances = tuple(d for d in rec.node.devices if d.partition_of == card)
    if instances:
        layout = tuple((d.partition or "", d.partition_start) for d in instances)
        return instances[0], layout, instances
    whole = [d for d in rec.node.devices if d.uuid == card and d.partition is None]
    if not whole:
        raise NotFound("card", card)
    return whole[0], (), (whole[0],)


def _held(plane: ControlPlane, node: str) -> set[str]:
    """The UUIDs of ``node``'s devices that allocations hold now."""
    return {
        uuid
        for job in plane.held_jobs.values()
        for alloc in job.allocations
        if alloc.node == node
        for uuid in alloc.device_uuids
    }


def _check_layout(device: Device, words: object) -> Layout:
    layout = read_layout("layout", words)
    scheme = load_partitions().scheme_for(device.model, device.vendor, load_accelerators())
    if scheme is None:
        raise RequestError("layout", words, f"{device.model} has no hardware partitions")
    problem = layout_problem(scheme, layout)
    if problem is not None:
        raise RequestError("layout", words, problem)
    return layout


def _event(conn: Connection, node: str, card: str, at: float, event: str, detail: str) -> None:
    conn.execute(
        insert(card_events).values(node=node, card=card, at=at, event=event, detail=detail)
    )


def recut(
    plane: ControlPlane,
    node: str,
    card: str,
    words: object,
    why: str,
    who: Principal | None = None,
) -> CardLayout:
    """Ask for card ``card`` of agent node ``node`` to be cut as ``words`` (``["3g.40gb@0",
    "3g.40gb@4"]``), for reason ``why``, as one step. Raises NotFound (node, card),
    RequestError on ``layout`` (not a layout, or one the card's geometry refuses) and
    :class:`RecutRefused`; each changes nothing. Asking for the layout the card holds drops a
    wanted one and changes nothing else."""
    with plane.locked():
        rec = plane.node(node)
        if rec is None:
            raise NotFound("node", node)
        device, _, _ = _card(rec, card)
        layout = _check_layout(device, words)
        asked = _checked(plane, rec, card, layout)
        with plane.write() as conn:
            _ask(plane, conn, asked, why, who)
            plane.recut_backoff.cleared(node, card, conn)  # the operator tries again: no rest
        return _view(plane, rec, card)


def recut_in(
    plane: ControlPlane,
    conn: Connection,
    rec: NodeRecord,
    card: str,
    layout: Layout,
    why: str,
    job: int | None = None,
) -> None:
    """:func:`recut` inside a write the caller holds (the scheduling pass's batch, asking a
    re-cut the cycle proposed for ``job``, stored with it: ``layout`` is then the engine's,
    checked against the geometry here as well). Raises as :func:`recut` does, before changing
    anything."""
    device, _, _ = _card(rec, card)
    layout = _check_layout(device, layout_words(layout))
    _ask(plane, conn, _checked(plane, rec, card, layout), why, None, job)


@dataclass(frozen=True, slots=True)
class _Asked:
    """A re-cut that passed the checks: the node, the card, the layout wanted, the change from
    the current one and the devices it destroys."""

    rec: NodeRecord
    card: str
    layout: Layout
    empty: bool
    gone: tuple[Device, ...]


def _checked(plane: ControlPlane, rec: NodeRecord, card: str, layout: Layout) -> _Asked:
    """The checks of :func:`recut` on a layout the geometry takes; raises :class:`RecutRefused`."""
    node = rec.node.name
    now = plane.clock()
    _, current, destroyable = _card(rec, card)
    if rec.source != "agent":
        raise RecutRefused(RecutRefusal.NOT_AGENT, f"node {node} has no agent to re-cut its cards")
    if rec.node.labels.get(RECUT_LABEL, "").lower() == "false":
        raise RecutRefused(RecutRefusal.NOT_ALLOWED, f"node {node} is labelled {RECUT_LABEL}=false")
    change = layout_change(current, layout)
    gone = [d for d in destroyable if (d.partition or "", d.partition_start) in change.destroy]
    if not current:  # an uncut card goes as a whole
        gone = list(destroyable) if not change.empty else []
    busy = sorted(d.uuid for d in gone if d.uuid in _held(plane, node))
    if busy:
        raise RecutRefused(
            RecutRefusal.BUSY, f"jobs hold {', '.join(busy)}, which the re-cut destroys", busy
        )
    idle = plane.card_idle
    recent = sorted(d.uuid for d in gone if now - idle.idle_since(d.uuid) < idle.min_idle_s)
    if recent:
        raise RecutRefused(
            RecutRefusal.NOT_IDLE,
            f"{', '.join(recent)} held work less than {idle.min_idle_s:g} s ago",
            recent,
        )
    return _Asked(rec, card, layout, change.empty, tuple(gone))


def _ask(
    plane: ControlPlane,
    conn: Connection,
    asked: _Asked,
    why: str,
    who: Principal | None,
    job: int | None = None,
) -> None:
    """Store ``asked`` (its wanted layout, the job it is for, cordons, event and audit row) in
    ``conn``."""
    rec, card, now = asked.rec, asked.card, plane.clock()
    node = rec.node.name
    shown = layout_words(asked.layout)
    key = (card_layouts.c.node == node) & (card_layouts.c.card == card)
    conn.execute(delete(card_layouts).where(key))
    if asked.empty:
        _event(conn, node, card, now, "asked", f"{shown}: cut so already ({why})")
    else:
        # nothing lands on them until the agent has cut the card
        cordoned = [d.uuid for d in asked.gone if d.uuid not in rec.cordoned_devices]
        conn.execute(
            insert(card_layouts).values(
                node=node,
                card=card,
                layout=shown,
                why=why,
                asked_at=now,
                cordoned=cordoned,
                job=job,
            )
        )
        _event(conn, node, card, now, "asked", f"{shown} ({why})")
        for uuid in cordoned:
            plane.cordon_device(conn, rec, uuid, True)
    plane.audit.record(who, "recut", f"node {node} card {card}", 200, f"{shown}: {why}", conn=conn)


def card_layout(plane: ControlPlane, node: str, card: str) -> CardLayout:
    """What :func:`recut` would show for card ``card`` of ``node``; NotFound for either."""
    with plane.locked():
        rec = plane.node(node)
        if rec is None:
            raise NotFound("node", node)
        return _view(plane, rec, card)


def _view(plane: ControlPlane, rec: NodeRecord, card: str) -> CardLayout:
    device, current, instances = _card(rec, card)
    held = _held(plane, rec.node.name)
    failed = plane.recut_backoff.last(rec.node.name, card)
    resting = plane.recut_backoff.resting(rec.node.name, card, plane.clock())
    busy = tuple(
        (d.partition or "", d.partition_start) for d in instances if d.partition and d.uuid in held
    )
    with plane.db.connect() as conn:
        key = (card_layouts.c.node == rec.node.name) & (card_layouts.c.card == card)
        row = conn.execute(select(card_layouts).where(key)).mappings().first()
        rows = conn.execute(
            select(card_events)
            .where((card_events.c.node == rec.node.name) & (card_events.c.card == card))
            .order_by(card_events.c.id.desc())
            .limit(EVENTS_SHOWN)
        ).mappings()
        events = tuple(CardEvent(r["at"], r["event"], r["detail"]) for r in rows)
    return CardLayout(
        node=rec.node.name,
        card=card,
        model=device.model,
        current=current,
        busy=busy,
        wanted=None if row is None else read_layout("layout", row["layout"]),
        why="" if row is None else row["why"],
        asked_at=None if row is None else row["asked_at"],
        job=None if row is None else row["job"],
        events=events,
        failures=0 if failed is None else failed.failures,
        resting_until=None if resting is None else resting.until,
    )


def orders(plane: ControlPlane, conn: Connection, rec: NodeRecord) -> list[tuple[str, list[str]]]:
    """The re-cuts ``rec``'s heartbeat reply carries, ``(card UUID, layout words)``, under the
    plane's lock in the heartbeat's transaction. A card the node now reports cut as wanted is
    done: its wanted layout goes, its cordons by the re-cut are lifted, and an event and an
    audit row say so. A card the node no longer reports goes too (its event says why)."""
    name = rec.node.name
    rows = conn.execute(select(card_layouts).where(card_layouts.c.node == name)).mappings()
    out: list[tuple[str, list[str]]] = []
    for row in list(rows):
        card, words = row["card"], list(row["layout"])
        try:
            _, current, _ = _card(rec, card)
        except NotFound:
            _done(plane, conn, rec, row, "failed", "the node no longer reports the card")
            continue
        if sorted(current, key=str) == sorted(read_layout("layout", words), key=str):
            _done(plane, conn, rec, row, "applied", ", ".join(words))
            plane.recut_backoff.cleared(name, card, conn)
            continue
        out.append((card, words))
    return out


def failed(plane: ControlPlane, conn: Connection, rec: NodeRecord, card: str, reason: str) -> None:
    """``rec``'s agent could not re-cut ``card`` (its vendor tool failed: ``reason``): the wanted
    layout is dropped, the event says why, and the card is at rest for the scheduling cycle
    (``recut_backoff.py``). A card with no wanted layout is ignored."""
    key = (card_layouts.c.node == rec.node.name) & (card_layouts.c.card == card)
    row = conn.execute(select(card_layouts).where(key)).mappings().first()
    if row is not None:
        _done(plane, conn, rec, row, "failed", reason[:500])
        plane.recut_backoff.failed(rec.node.name, card, plane.clock(), reason[:500], conn)
        plane.bump()  # a job waiting for it is tried again: its reason names the rest


def _done(
    plane: ControlPlane,
    conn: Connection,
    rec: NodeRecord,
    row: RowMapping,
    event: str,
    detail: str,
) -> None:
    """Re-cut ``row`` of ``rec`` ended (``event``: applied or failed): its row goes, its
    cordons are lifted (an instance it destroyed may be gone, or back with the same UUID), and
    an event and an audit row say so."""
    name, card = rec.node.name, row["card"]
    key = (card_layouts.c.node == name) & (card_layouts.c.card == card)
    conn.execute(delete(card_layouts).where(key))
    _event(conn, name, card, plane.clock(), event, detail)
    present = {d.uuid for d in rec.node.devices}
    for uuid in row["cordoned"]:
        if uuid in present:
            plane.cordon_device(conn, rec, uuid, False)
        elif uuid in rec.cordoned_devices:
            rec.cordoned_devices.discard(uuid)
            store.update_node(conn, name, {"cordoned_devices": sorted(rec.cordoned_devices)})
    result = detail if event == "applied" else f"failed: {detail}"
    plane.audit.record(None, f"recut_{event}", f"node {name} card {card}", 200, result, conn=conn)
