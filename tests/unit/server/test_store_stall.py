"""A thread that waits on a store that does not answer holds the plane's lock: whoever waits for
the lock, or opens a store connection, is refused with a 503 once it has waited ``STALL_S``, not
queued behind it (plane/store_stall.py; issue 50)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
from server_kit import Server
from sqlalchemy import text

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


def test_a_write_busy_in_its_own_python_is_no_stall(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only the time the lock's holder waits on a statement or a commit counts: a write that
    spends long in its own work (a large registration, an engine rebuild on a loaded machine) is
    waited for, and /healthz says nothing of the store."""
    monkeypatch.setattr(store_stall, "STALL_S", 0.2)
    plane = server.plane
    inside, done = threading.Event(), threading.Event()

    def busy() -> None:
        with plane.write() as conn:
            conn.execute(text("SELECT 1"))
            inside.set()
            time.sleep(0.8)  # four times the threshold, outside the store
        done.set()

    threading.Thread(target=busy, daemon=True).start()
    assert inside.wait(HELD_S)
    assert plane.store_stall() is None
    with plane.locked():  # waited for, not refused
        assert done.is_set()


def test_a_statement_the_store_does_not_answer_is_a_stall(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A statement that hangs under the lock (here a SQL function that sleeps) marks the store
    stalled: a waiter is refused; once it is answered the lock is taken as ever."""
    monkeypatch.setattr(store_stall, "STALL_S", 0.2)
    plane = server.plane
    sent, done = threading.Event(), threading.Event()

    def hang() -> None:
        with plane.write() as conn:
            driver = conn.connection.driver_connection
            driver.create_function("hang", 0, lambda: time.sleep(1.0) or 1)  # type: ignore[union-attr]
            sent.set()
            conn.execute(text("SELECT hang()"))
        done.set()

    threading.Thread(target=hang, daemon=True).start()
    assert sent.wait(HELD_S)
    until(lambda: plane.store_stall() is not None)
    with pytest.raises(Unavailable, match="store has not answered"), plane.locked():
        pass
    until(done.is_set)
    with plane.locked():
        assert plane.store_stall() is None
