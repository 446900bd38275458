"""What ``/healthz`` says: whether the store can be written, and what the last start repaired.

A store that cannot be written (disk full, a read-only file or mount) makes every change fail;
the server says so once in its log and on ``/healthz`` (503 with the reason), not with a traceback
per request, and clears the failure at the first write that works again. Notes are what a start
found inconsistent in the store and set aside (an allocation that over-commits a device, one on a
device that is gone): the server serves on, and says what it did.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

from sqlalchemy.exc import OperationalError

log = logging.getLogger("xpupool.server")


class Health:
    """Thread-safe; ``failure`` is None while the store writes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.failure: str | None = None
        self.notes: list[str] = []

    def fail(self, reason: str) -> None:
        """Record a store failure; logged once per distinct reason (a full disk fails every
        write, and one line says it as well as a thousand)."""
        with self._lock:
            if reason == self.failure:
                return
            self.failure = reason
        log.error("unhealthy: %s", reason)

    def recover(self) -> None:
        with self._lock:
            if self.failure is None:
                return
            self.failure = None
        log.warning("healthy again: the store is writable")

    def note(self, text: str) -> None:
        """Something a start found and set aside (kept for this process's life, shown on
        ``/healthz`` below the status line)."""
        with self._lock:
            self.notes.append(text)
        log.warning("%s", text)

    def report(self) -> tuple[bool, str]:
        """(healthy, text): the status line, then one line per note."""
        with self._lock:
            head = "ok" if self.failure is None else f"unhealthy: {self.failure}"
            return self.failure is None, "\n".join([head, *self.notes]) + "\n"


def store_failure(exc: BaseException) -> str:
    """One line for a failed store operation: the driver's message, never the SQL or its
    parameters (they may hold a job's environment)."""
    if isinstance(exc, OperationalError):
        return f"store write failed: {exc.orig}"
    if isinstance(exc, OSError):
        where = f" ({exc.filename})" if exc.filename else ""
        return f"data dir write failed: {exc.strerror or exc}{where}"
    return f"store failed: {type(exc).__name__}: {exc}"


def probe_writable(directory: Path) -> None:
    """Create, fill (4 KiB, synced) and remove a file in ``directory``. Raises OSError when the
    filesystem is full or read-only, or this process may not write there: what a database file
    that happens to have room in its pages would not show."""
    probe = directory / f".write-probe-{os.getpid()}"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, b"\0" * 4096)
            os.fsync(fd)
        finally:
            os.close(fd)
    finally:
        probe.unlink(missing_ok=True)
