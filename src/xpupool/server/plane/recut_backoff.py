"""How long the scheduling cycle leaves a card alone after its re-cuts failed (issue 53).

An agent that reports its vendor tool failed to re-cut a card (``card_recut.failed``) drops the
wanted layout; without a pause the next pass would propose the same re-cut, the tool would fail
the same way, and so on, every pass. So each failure in a row puts the card at rest for the
scheduling cycle, doubling from :data:`BASE_S` up to :data:`MAX_S`: the cycle offers no re-cut of
it meanwhile (``auto_recut.PlaneRecuts.cards``), and a job that waits for it is tried again when
the rest ends. A re-cut applied on the card, or an operator's ``PUT .../layout`` (the way to try
again at once: it is never held back), ends the rest and the count. Each change is written in
the caller's transaction (``card_rests``) and read back when the plane starts (:meth:`load`): a
restarted plane neither tries a resting card early nor starts its count afresh.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection, delete, insert, select

from xpupool.server.storage.card_layouts import card_rests

__all__ = ["BASE_S", "MAX_S", "RecutBackoff", "Resting"]

BASE_S = 60.0
"""The rest after a card's first failed re-cut, s; each further failure in a row doubles it."""
MAX_S = 1800.0
"""The longest rest, s (30 minutes): a card whose tool keeps failing is still tried now and then."""


@dataclass(frozen=True, slots=True)
class Resting:
    """A card's failed re-cuts in a row (``failures``), the Unix time before which the cycle
    proposes none of it (``until``) and the tool's words on the last one (``reason``)."""

    failures: int
    until: float
    reason: str


class RecutBackoff:
    """The cards at rest, by (node, card UUID)."""

    def __init__(self, base_s: float = BASE_S, max_s: float = MAX_S) -> None:
        self.base_s = base_s
        self.max_s = max_s
        self._cards: dict[tuple[str, str], Resting] = {}

    def load(self, conn: Connection) -> None:
        """The rests stored (a plane's start, or its books read again), in place of these."""
        rows = conn.execute(select(card_rests)).mappings()
        self._cards = {
            (r["node"], r["card"]): Resting(r["failures"], r["resting_until"], r["reason"])
            for r in rows
        }

    def failed(
        self, node: str, card: str, now: float, reason: str, conn: Connection | None = None
    ) -> Resting:
        """A re-cut of ``card`` failed at ``now``: its rest, twice the last one (at most
        :attr:`max_s`), stored in ``conn`` (None: kept in memory only)."""
        last = self._cards.get((node, card))
        failures = 1 if last is None else last.failures + 1
        rest = min(self.max_s, self.base_s * 2.0 ** min(failures - 1, 32))
        found = self._cards[(node, card)] = Resting(failures, now + rest, reason)
        if conn is not None:
            _delete(conn, node, card)
            conn.execute(
                insert(card_rests).values(
                    node=node,
                    card=card,
                    failures=found.failures,
                    resting_until=found.until,
                    reason=reason,
                )
            )
        return found

    def cleared(self, node: str, card: str, conn: Connection | None = None) -> None:
        """A re-cut of ``card`` was applied, or an operator asked one: no rest, no count (gone
        from ``conn`` too)."""
        if self._cards.pop((node, card), None) is not None and conn is not None:
            _delete(conn, node, card)

    def forget_node(self, conn: Connection, node: str) -> None:
        """Node ``node`` is deleted: its cards' rests go (memory and ``conn``); registered
        again, its cards start with none."""
        self._cards = {k: v for k, v in self._cards.items() if k[0] != node}
        conn.execute(delete(card_rests).where(card_rests.c.node == node))

    def last(self, node: str, card: str) -> Resting | None:
        """``card``'s failed re-cuts since its last success or operator's ask; None: none."""
        return self._cards.get((node, card))

    def resting(self, node: str, card: str, now: float) -> Resting | None:
        """``card``'s rest when it lasts beyond ``now``; None when the cycle may re-cut it."""
        found = self._cards.get((node, card))
        return found if found is not None and now < found.until else None


def _delete(conn: Connection, node: str, card: str) -> None:
    conn.execute(
        delete(card_rests).where((card_rests.c.node == node) & (card_rests.c.card == card))
    )
