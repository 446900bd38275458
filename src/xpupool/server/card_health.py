"""What the server does when an agent reads one of its cards unhealthy, and when it may serve again.

Agents report each card's health with its cause in every heartbeat (``DeviceMetrics.healthy``,
``health_cause``; ``agent/monitor.py``). A card read unhealthy is marked with the cause, cordoned
through the plane's device cordon (stored: nothing new is placed there, across rebuilds and
restarts), and every job holding a share of it is stopped as if its node were lost
(``StopCause.NODE_LOST``): the job lifecycle then requeues it or marks it lost by its
``on_node_lost`` policy and retries, the one mechanism a lost node uses. A cause the agent's
operator keeps as a warning arrives with the card healthy: shown and counted, nothing else.

The card comes back by itself once it has read healthy, with no new fault, for ``settle_s``
(``xpupool up --card-settle``): the cordon this book set is lifted. The admin's uncordon
(``xpupool device uncordon UUID``) brings it back at once; the cause it had is then taken as
seen, and only a cause of another kind, or the same after a healthy reading, acts again (a
cause's kind, ``xid-79``, is what is compared: its text may carry a count that grows). A cordon the
admin set before the fault is left alone. The book is memory: after a server restart the health
cordon stays until the admin lifts it, and a card still failing is marked again by its agent.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from sqlalchemy import Connection

from xpupool.probes.health_causes import cause_key
from xpupool.server import job_lifecycle as lc
from xpupool.server.plane.records import HeldJob, NodeRecord
from xpupool.server.schemas.agent_protocol import DeviceMetrics
from xpupool.server.schemas.jobs import StopCause

log = logging.getLogger("xpupool.server")

DEFAULT_SETTLE_S = 300.0


class ControlPlane(Protocol):
    """What this book uses of the plane (``server/plane/control.py``, which holds the book: a
    protocol, so that the two modules do not import each other)."""

    monotonic: Callable[[], float]

    @property
    def held_jobs(self) -> Mapping[int, HeldJob]: ...

    def node(self, name: str) -> NodeRecord | None: ...

    def cordon_device(
        self, conn: Connection, rec: NodeRecord, uuid: str, cordoned: bool
    ) -> None: ...

    def apply(self, conn: Connection, job_id: int, event: lc.Event) -> lc.Outcome: ...


@dataclass(slots=True)
class CardState:
    """A card with something to say: ``cause``, and whether it is a fault (``unhealthy``) or a
    warning. ``last_bad``: monotonic time it last read unhealthy. ``cordoned``: this book
    cordoned it (and lifts the cordon when it settles). ``seen``: the admin uncordoned it while
    it read unhealthy with this cause."""

    cause: str
    unhealthy: bool
    last_bad: float
    cordoned: bool = False
    seen: bool = False


class CardHealth:
    """Per-card health the agents reported, and the count of health events by cause kind."""

    def __init__(self, settle_s: float = DEFAULT_SETTLE_S) -> None:
        self.settle_s = settle_s
        self.cards: dict[str, CardState] = {}
        self.events: Counter[str] = Counter()  # cause kind -> health events (Prometheus)
        self._counting = threading.Lock()  # the scrape reads the counts without the plane's lock

    def counts(self) -> dict[str, int]:
        """Health events by cause kind, a copy (read by the metrics scrape)."""
        with self._counting:
            return dict(self.events)

    def _count(self, cause: str) -> None:
        with self._counting:
            self.events[cause_key(cause)] += 1

    def state(self, uuid: str) -> tuple[str, str | None]:
        """(health, cause) of card ``uuid`` for views: 'healthy', 'warning' or 'unhealthy'."""
        card = self.cards.get(uuid)
        if card is None:
            return "healthy", None
        return ("unhealthy" if card.unhealthy else "warning"), card.cause

    def observe(
        self, plane: ControlPlane, conn: Connection, node: str, readings: Iterable[DeviceMetrics]
    ) -> None:
        """Take one heartbeat's readings of ``node``'s cards, in its transaction, under the
        plane's lock."""
        now = plane.monotonic()
        for m in readings:
            if m.healthy is False:
                self._bad(plane, conn, node, m.uuid, m.health_cause or "unhealthy", now)
            elif m.healthy is True:
                self._good(plane, conn, node, m.uuid, m.health_cause or "", now)

    def forget(self, uuid: str) -> None:
        """The admin uncordoned card ``uuid``: its fault is taken as seen, not acted on again."""
        card = self.cards.get(uuid)
        if card is not None and card.unhealthy:
            card.seen, card.cordoned = True, False

    # ------------------------------------------------------------------ internals
    def _bad(
        self, plane: ControlPlane, conn: Connection, node: str, uuid: str, cause: str, now: float
    ) -> None:
        card = self.cards.get(uuid)
        if card is not None and card.unhealthy and cause_key(card.cause) == cause_key(cause):
            card.last_bad, card.cause = now, cause  # its text may change (a count that grows)
            return  # known: already acted on (or seen by the admin)
        cordoned = card.cordoned if card is not None and card.unhealthy else False
        card = CardState(cause, True, now, cordoned=cordoned)
        self.cards[uuid] = card
        self._count(cause)
        log.warning("card %s on %s unhealthy: %s", uuid, node, cause)
        rec = plane.node(node)
        if rec is not None and uuid not in rec.cordoned_devices:
            plane.cordon_device(conn, rec, uuid, True)
            card.cordoned = True
        why = f"card {uuid} on {node} unhealthy: {cause}"
        for job in list(plane.held_jobs.values()):
            if job.stop is None and any(
                share.uuid == uuid for a in job.allocations for share in a.devices
            ):
                plane.apply(conn, job.id, lc.Stop(StopCause.NODE_LOST, why))

    def _good(
        self, plane: ControlPlane, conn: Connection, node: str, uuid: str, cause: str, now: float
    ) -> None:
        card = self.cards.get(uuid)
        if card is not None and card.unhealthy and card.seen:
            del self.cards[uuid]  # back by the admin's word, and healthy: a fault acts again
            card = None
        if card is not None and card.unhealthy:
            if now - card.last_bad < self.settle_s:
                return
            rec = plane.node(node)
            if card.cordoned and rec is not None and uuid in rec.cordoned_devices:
                plane.cordon_device(conn, rec, uuid, False)
            log.warning(
                "card %s on %s healthy for %g s after '%s': back in service",
                uuid,
                node,
                self.settle_s,
                card.cause,
            )
            del self.cards[uuid]
            card = None
        if not cause:
            self.cards.pop(uuid, None)
            return
        if card is None or cause_key(card.cause) != cause_key(cause):
            self._count(cause)
            log.info("card %s on %s: warning: %s", uuid, node, cause)
            self.cards[uuid] = CardState(cause, False, now)
