"""A thread that waits on a store that does not answer holds the plane's lock: whoever waits for
the lock, or opens a store connection, is refused with a 503 once it has waited ``STALL_S``, not
queued behind it (plane/store_stall.py; issue 50)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
from server_kit import Server

from xpupool.model.errors import Unavailable
from xpupool.server.plane import store_stall
from xpupool.server.plane.lock import PlaneLock

HELD_S = 30.0  # how long the holder would hang: a refusal comes long before, or the test fails


def until(check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + HELD_S
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def hung_holder(lock: PlaneLock, in_store: bool) -> tuple[threading.Event, threading.Event]:
    """A thread holding ``lock`` (marked in the store when ``in_store``) until the second event."""
    holding, done = threading.Event(), threading.Event()

    def hold() -> None:
        with lock:
            if in_store:
                with lock.stall.entered():
                    holding.set()
                    done.wait(HELD_S)
            else:
                holding.set()
                done.wait(HELD_S)

    threading.Thread(target=hold, daemon=True).start()
    assert holding.wait(HELD_S)
    return holding, done


def test_a_waiter_is_refused_naming_the_store_once_the_holder_has_waited_on_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(store_stall, "STALL_S", 0.2)
    lock = PlaneLock()
    _, done = hung_holder(lock, in_store=True)
    try:
        with pytest.raises(Unavailable, match="store has not answered"), lock:
            pass
        with pytest.raises(Unavailable, match="store has not answered"):
            lock.acquire_as_writer()
        assert lock.writers_waiting == 0
    finally:
        done.set()
    with lock:  # free again: taken as ever
        assert lock.stall.stalled_s() is None


def test_a_holder_busy_outside_the_store_is_waited_for(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store_stall, "STALL_S", 0.2)
    lock = PlaneLock()
    _, done = hung_holder(lock, in_store=False)
    threading.Timer(0.6, done.set).start()  # three times the stall threshold, then it lets go
    with lock:
        assert done.is_set()


def test_a_new_store_connection_is_refused_while_the_store_is_stalled(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_stall, "STALL_S", 0.2)
    plane = server.plane
    _, done = hung_holder(plane._lock, in_store=True)
    try:
        until(lambda: plane.store_stall() is not None)
        with pytest.raises(Unavailable, match="store has not answered"), plane.db.connect():
            pass
    finally:
        done.set()
    until(lambda: plane.store_stall() is None)  # the holder left the store
    with plane.db.connect():  # answered again: connections are made as ever
        pass
