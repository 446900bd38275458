"""A replica's output: a pipe the agent drains into the replica's log file, up to a cap.

The job never holds the log file (it runs as another uid, and the file is the agent's, 0600): it
writes to a pipe, and a thread of the agent copies what arrives into the file until the cap is
reached, then writes one marker line and keeps reading and discarding, so a chatty job is never
blocked on a full pipe and never fills the disk.
"""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path

CHUNK = 64 << 10


def cut_marker(cap_bytes: int) -> bytes:
    size = f"{cap_bytes >> 20} MiB" if cap_bytes >= 1 << 20 else f"{cap_bytes} bytes"
    return f"\n[xpupool: log cut at {size}; further output discarded]\n".encode()


def open_log(path: Path) -> int:
    """The log file for appending, created 0600 (whatever the umask)."""
    return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)


class LogPump:
    """Copies ``read_fd`` into ``path`` until EOF (every writer of the pipe is gone); owns and
    closes ``read_fd``. ``written``: bytes kept; ``cut``: True once the cap was reached."""

    def __init__(self, read_fd: int, path: Path, cap_bytes: int, name: str = "log") -> None:
        self.read_fd = read_fd
        self.path = path
        self.cap_bytes = cap_bytes
        self.written = 0
        self.discarded = 0
        self.cut = False
        self._out = open_log(path)
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
        room = self.cap_bytes - self.written
        if len(chunk) <= room:
            self._write(chunk)
            return
        self._write(chunk[:room])
        self._write(cut_marker(self.cap_bytes))
        self.discarded += len(chunk) - room
        self.cut = True

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            n = os.write(self._out, view)
            view = view[n:]
        self.written += len(data)

    def done(self) -> bool:
        return not self.thread.is_alive()

    def join(self, timeout_s: float | None = None) -> None:
        self.thread.join(timeout_s)
