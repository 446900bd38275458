"""How long the plane's lock has been held by a statement the store does not answer.

A store behind a partition that drops packets (a blackhole) does not refuse a statement: it never
answers it, and the thread that sent it waits, holding the plane's lock, until TCP gives up (libpq's
``tcp_user_timeout`` and keepalives, ``storage/meta.py``; a lease's end, ``server/ownership.py``).
Everything else that takes the lock would queue behind it, the scheduling pass on the event loop
too, and with it every request, ``/healthz`` included (issue 50). So the lock's holder marks the
time it sent a statement or a commit (:meth:`StoreStall.enter`, from the plane's cursor events, and
:meth:`StoreStall.entered` around a commit; its own Python between statements does not count,
however long), and once it has been in the store for
``STALL_S``, whoever waits for the lock, or opens a store connection, is refused at once with a 503
that names the store (:meth:`StoreStall.refuse`) instead of waiting. Nothing is written twice: the
hung statement's transaction either commits, and its caller is answered, or fails, and memory is
read back from the store (``ControlPlane.write``); a refused request changed nothing.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from xpupool.model.errors import Unavailable

STALL_S = 3.0
"""Seconds a statement may stay unanswered before the store counts as stalled: a write of the plane
takes milliseconds, a large one (a retention sweep, a big pool's registration) well under a
second; a lease is 10 s."""


class StoreStall:
    """When the lock's holder entered the store (None: it is not in it)."""

    def __init__(self) -> None:
        self._since: float | None = None

    def enter(self) -> None:
        """The lock's holder sends a statement (``ControlPlane``'s cursor events)."""
        if self._since is None:
            self._since = time.monotonic()

    def leave(self) -> None:
        """The store answered it."""
        self._since = None

    @contextmanager
    def entered(self) -> Iterator[None]:
        """The block talks to the store under the plane's lock, a commit (re-entrant: the
        outermost marks); a statement is marked by :meth:`enter` and :meth:`leave`."""
        outermost = self._since is None
        if outermost:
            self._since = time.monotonic()
        try:
            yield
        finally:
            if outermost:
                self._since = None

    def stalled_s(self) -> float | None:
        """For how long the store has not answered, once that is ``STALL_S`` or more; else None."""
        since = self._since
        if since is None:
            return None
        waited = time.monotonic() - since
        return waited if waited >= STALL_S else None

    def refuse(self) -> None:
        """Raise :class:`Unavailable` (503) while the store is stalled."""
        waited = self.stalled_s()
        if waited is not None:
            raise Unavailable(
                f"the store has not answered a statement for {waited:.0f} s (a network "
                "partition or an overloaded database?): nothing was changed, try again later"
            )
