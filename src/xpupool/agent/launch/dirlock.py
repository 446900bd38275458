"""One writer per data dir: ``xpupool up`` and ``xpupool agent`` lock theirs before touching it.

Two servers, or two agents, on one data dir would each start the jobs they find, kill the other's
copies and fight over the store (issue 20). The lock is ``flock`` on a ``lock`` file in the dir: the
kernel drops it when the process dies, however it dies, so a crash never leaves a stale lock. The
file holds the holder's pid, only to name it in the refusal.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from xpupool.model.errors import XpupoolError

LOCK_FILE = "lock"


class DirInUseError(XpupoolError):
    """Another live process holds the data dir; the message is one line naming it."""


class DirLock:
    """Held from :meth:`acquire` until :meth:`release` or the process ends."""

    def __init__(self, directory: Path, what: str) -> None:
        self.path = directory / LOCK_FILE
        self.what = what
        self._fd: int | None = None

    def acquire(self) -> DirLock:
        """Lock now or raise DirInUseError at once; creates the directory (0700) if missing."""
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError:
            return (
                self  # a directory that cannot be written: the start refuses it next, in its words
            )
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise DirInUseError(
                f"{self.path.parent} is in use by another {self.what} (pid {holder}); "
                "stop it first, or give this one another directory"
            ) from None
        try:  # the pid only names the holder in a refusal: a full disk does not stop the lock
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
        except OSError:
            pass
        os.set_inheritable(fd, False)  # jobs started later do not hold it
        self._fd = fd
        return self

    @property
    def held(self) -> bool:
        """Whether this process holds the lock (not so when the directory cannot be written)."""
        return self._fd is not None

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
