"""A replica's output: a pipe the agent drains into the replica's log file, which keeps its last
``--log-cap`` bytes.

The job never holds the log file (it runs as another uid, and the file is the agent's, 0600): it
writes to a pipe, and a thread of the agent copies what arrives into the file; past the cap the
oldest bytes are dropped from the file's start, its offsets unchanged (``xpupool/log_rotation.py``:
why every job's log rotates), so a chatty job is never blocked on a full pipe, never fills the
disk, and its last words are kept. Where the filesystem cannot drop them, the cap cuts the log
instead: one marker line, then the rest is read and discarded. Output that would take the disk
under its reserve of free space, or that the disk refuses (full, over quota), is discarded the
same way until there is room again (``xpupool/disk_reserve.py``): the log says where and how much.
"""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path

from xpupool.disk_reserve import (
    held_back_marker,
    kept_again_marker,
    reserve_on,
    room_above,
)
from xpupool.log_rotation import keep_last

CHUNK = 64 << 10


def cut_marker(cap_bytes: int) -> bytes:
    size = f"{cap_bytes >> 20} MiB" if cap_bytes >= 1 << 20 else f"{cap_bytes} bytes"
    return f"\n[xpupool: log cut at {size}; further output discarded]\n".encode()


def open_log(path: Path) -> int:
    """The log file for appending, created 0600 (whatever the umask)."""
    return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)


class LogPump:
    """Copies ``read_fd`` into ``path`` until EOF (every writer of the pipe is gone); owns and
    closes ``read_fd``. ``written``: the log's length (what rotation dropped included); ``cut``:
    True once the cap was reached where the log cannot rotate (``rotating`` False);
    ``held``: bytes discarded since the disk last had room (None while it has).
    ``reserve_bytes``: free space the log leaves on its filesystem (``--log-reserve``)."""

    def __init__(
        self, read_fd: int, path: Path, cap_bytes: int, name: str = "log", reserve_bytes: int = 0
    ) -> None:
        self.read_fd = read_fd
        self.path = path
        self.cap_bytes = cap_bytes
        self.written = 0
        self.discarded = 0
        self.cut = False
        self.rotating = True  # until the filesystem says it cannot drop a log's oldest bytes
        self.held: int | None = None
        self._out = open_log(path)
        self.reserve_bytes = reserve_on(self._out, reserve_bytes)
        with contextlib.suppress(OSError):
            self.written = os.fstat(self._out).st_size
        self.thread = threading.Thread(target=self._run, name=f"xpupool-{name}", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            while chunk := os.read(self.read_fd, CHUNK):
                self._keep(chunk)
        except OSError:
            pass
        finally:
            os.close(self.read_fd)
            os.close(self._out)

    def _keep(self, chunk: bytes) -> None:
        if self.cut:
            self.discarded += len(chunk)
            return
        if self.rotating:
            if not self._put(chunk):
                self._hold(len(chunk))
                return
            if self.written > self.cap_bytes:
                with contextlib.suppress(OSError):  # a log that cannot rotate now: next time
                    self.rotating = keep_last(self._out, self.cap_bytes) is not None
            if not self.rotating and self.written > self.cap_bytes:  # cannot: cut here
                with contextlib.suppress(OSError):
                    self._write(cut_marker(self.cap_bytes))
                self.cut = True
            return
        room = self.cap_bytes - self.written
        kept = chunk[: max(room, 0)]
        if not self._put(kept):  # no room on the disk: discard until there is
            self._hold(len(chunk))
            return
        if len(chunk) > room:
            with contextlib.suppress(OSError):
                self._write(cut_marker(self.cap_bytes))
            self.discarded += len(chunk) - room
            self.cut = True

    def _put(self, data: bytes) -> bool:
        """Write ``data`` (after the line that ends a gap, if one is open) unless that would
        take the disk under the reserve, or the disk refuses it; whether it was written."""
        if room_above(self._out, self.reserve_bytes) < len(data):
            return False
        try:
            if self.held is not None:
                self._write(kept_again_marker(self.held))
                self.held = None
            self._write(data)
        except OSError:  # full, over quota: as under the reserve
            return False
        return True

    def _hold(self, n_bytes: int) -> None:
        """Discard ``n_bytes``; the first of a gap writes the line that says so (it takes a few
        bytes of the reserve)."""
        self.discarded += n_bytes
        if self.held is None:
            self.held = 0
            with contextlib.suppress(OSError):
                self._write(held_back_marker(self.reserve_bytes))
        self.held += n_bytes

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            n = os.write(self._out, view)
            self.written += n
            view = view[n:]

    def done(self) -> bool:
        return not self.thread.is_alive()

    def join(self, timeout_s: float | None = None) -> None:
        self.thread.join(timeout_s)
