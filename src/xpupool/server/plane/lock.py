"""The plane's one lock, private to the plane: its modules take it through
``ControlPlane.locked()`` (one consistent state of the books for a block) and
``ControlPlane.write()`` (a store transaction under it); outside the package, named operations
take it (tests/unit/server/test_plane_lock_boundary.py).

A thread waiting for it is refused (``Unavailable``, 503) once its holder has waited on the store
for ``store_stall.STALL_S``: it would wait for the store too (``store_stall.py``).

It also counts the threads waiting to write: the lock is not fair (a thread that lets it go may
take it again at once), so a scheduling pass lets waiting writers in between its batches
(``server/scheduler_loop.py``, ``scheduling_pass.py``) by waiting for that count to drop to zero.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from xpupool.server.plane.store_stall import StoreStall

WAIT_SLICE_S = 0.05
"""How often a thread waiting for the lock looks whether the store has stalled."""


class PlaneLock:
    """A re-entrant lock, and the count of writers waiting for it (``writers_waiting``)."""

    def __init__(self) -> None:
        self.mutex: Any = threading.RLock()  # Any: a test slows it down with a wrapper
        self.writers_waiting = 0
        self._guard = threading.Condition()  # notified when no writer waits any more
        self.stall = StoreStall()  # the holder marks its statements; waiters look at it
        self._owner: int | None = None  # the thread holding the lock (its statements count)
        self._depth = 0

    def __enter__(self) -> None:
        self._take()

    def __exit__(self, *_exc: object) -> None:
        self.release()

    def held_here(self) -> bool:
        """Whether the calling thread holds the lock."""
        return self._owner == threading.get_ident()

    def acquire_as_writer(self) -> None:
        """Take the lock, counted in ``writers_waiting`` until it is taken; let it go with
        :meth:`release`."""
        with self._waiting():
            self._take()

    def _take(self) -> None:
        """Take the lock, or raise ``Unavailable`` once the store holds its holder stalled."""
        while not self.mutex.acquire(timeout=WAIT_SLICE_S):
            self.stall.refuse()
        self._owner = threading.get_ident()
        self._depth += 1

    def release(self) -> None:
        self._depth -= 1
        if not self._depth:
            self._owner = None
            self.stall.leave()  # a statement that failed was answered too
        self.mutex.release()

    @contextmanager
    def _waiting(self) -> Iterator[None]:
        with self._guard:
            self.writers_waiting += 1
        try:
            yield
        finally:
            with self._guard:
                self.writers_waiting -= 1
                if not self.writers_waiting:
                    self._guard.notify_all()

    def wait_for_writers(self, timeout_s: float) -> bool:
        """Block (``timeout_s`` at most) until no thread waits to write; whether none does. One
        sleep until the last one is in, not a poll: a poll woke the waiting thread very often,
        and each wake took the GIL from the threads it waited for."""
        with self._guard:
            return self._guard.wait_for(lambda: not self.writers_waiting, timeout_s)
