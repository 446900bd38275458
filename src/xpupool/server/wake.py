"""What wakes the scheduling loop: set from any thread, awaited on the server's event loop.

The scheduling passes run on the event loop that serves the API (``scheduler_loop.run_passes``
says why). A submission wakes the loop from the loop itself; the agent, the lost-node watch and
tests wake it from their threads."""

from __future__ import annotations

import asyncio
import threading
from contextlib import suppress


class Wake:
    """A flag any thread may set, which a coroutine on one event loop awaits (``wait``).

    Until a loop is bound (``wait`` binds the running one) it is a plain flag: a server built
    without its background passes (tests calling ``schedule_pass`` themselves) still reads
    ``is_set``."""

    def __init__(self) -> None:
        self._set = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._event: asyncio.Event | None = None

    def set(self) -> None:
        self._set = True
        loop, event = self._loop, self._event
        if loop is None or event is None:
            return
        if threading.get_ident() == self._loop_thread:
            event.set()
        else:
            with suppress(RuntimeError):  # the loop is closed: nothing waits any more
                loop.call_soon_threadsafe(event.set)

    def clear(self) -> None:
        self._set = False
        if self._event is not None:
            self._event.clear()

    def is_set(self) -> bool:
        return self._set

    async def wait(self, timeout_s: float) -> None:
        """Return once set (at once if it is already) or after ``timeout_s``, whichever is
        first, and clear it: what set it is seen by whatever runs next. A set that comes
        after the clear wakes the next ``wait``."""
        if self._event is None or self._loop is not asyncio.get_running_loop():
            self._loop = asyncio.get_running_loop()
            self._loop_thread = threading.get_ident()
            self._event = asyncio.Event()
        event = self._event
        if self._set:
            event.set()
        with suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await event.wait()
        self.clear()
