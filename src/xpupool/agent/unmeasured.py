"""Replicas whose processes the share watch could not measure, pass after pass.

A text tool's row is charged only after the agent has checked that its process holds the card's
node open (``agent/card_holders.py``); a process whose open files cannot be checked (more than
the agent checks for one process, or more than its replica's share of a pass's checks) is left
out, so without this a job could hold many files and never be measured, within its grant
forever. Each replica's processes draw on a budget of their own (``Monitor.read``'s ``owner``),
so only a replica's own processes can leave its rows unchecked, never another tenant's. A
replica with rows left unchecked on some card for ``passes`` passes in a row gets an event
naming the cards; with ``stop`` (``xpupool agent --unmeasured-stop``) it is stopped, with that
reason, as a replica over its share is. A measured pass starts the count again.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass, field

Key = tuple[int, int]  # (job, replica)


@dataclass(slots=True)
class UnmeasuredWatch:
    """How many passes in a row each replica went unmeasured, and what is done about it."""

    passes: int = 3
    stop: bool = False
    _count: dict[Key, int] = field(default_factory=dict)

    def check(self, key: Key, cards: Collection[str]) -> str:
        """Why replica ``key`` has gone unmeasured too long, or "". ``cards``: the cards where
        rows of its processes were left unchecked this pass (empty: it was measured)."""
        if not cards:
            self._count.pop(key, None)
            return ""
        n = self._count[key] = self._count.get(key, 0) + 1
        if n < self.passes:
            return ""
        on = ", ".join(sorted(cards))
        return (
            f"its processes on card {on} could not be measured for {n} passes in a row"
            " (their open files could not be checked: more than the agent checks)"
        )

    def keep(self, running: Iterable[Key]) -> None:
        """Forget every replica but ``running``."""
        alive = set(running)
        for key in [k for k in self._count if k not in alive]:
            del self._count[key]
