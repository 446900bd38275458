"""A replica's log keeps its last N bytes (``--log-cap``), with offsets that stay those of the
whole output (issue 47).

A log that stops at its cap loses everything a long-running replica (a service) says after it,
which is what its operator needs most: the last minutes before a failure. So a log past its cap
drops its oldest bytes instead, as Kubernetes rotates every container's log. It does so for every
job, not only for services: a batch job's end (its traceback) is worth more than its start too,
and one rule for all logs keeps the agent out of knowing what a job is for.

The oldest bytes are dropped in place, by punching a hole at the start of the file
(``fallocate(PUNCH_HOLE | KEEP_SIZE)``): the file keeps its length, so every offset (the agent's
``shipped``, the server's ``taken``, a follower's ``offset``) keeps meaning the same byte, and
the disk holds only what is kept. The first byte kept is the first data after the hole
(``lseek(SEEK_DATA)``), so a reader at an offset rotated away is given the oldest bytes kept and
told how many it missed, and the state survives a restart with no side file. Holes are punched
in whole blocks of :data:`ALIGN` bytes, so that the first byte kept is exactly where the data
starts. A filesystem that cannot punch holes (``EOPNOTSUPP``) keeps the cap as a cut instead;
callers then end the log with a marker, as before.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
from functools import cache

SKIPPED_HEADER = "X-Xpupool-Log-Skipped"
"""The logs route's header: bytes between the offset asked and the first byte answered, which the
log no longer holds."""
ALIGN = 4096  # bytes: holes are punched in whole blocks of this size
_PUNCH_HOLE = 0x02  # FALLOC_FL_PUNCH_HOLE (linux/falloc.h)
_KEEP_SIZE = 0x01  # FALLOC_FL_KEEP_SIZE


@cache
def _fallocate() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    """libc's ``fallocate``, or None where there is none (not Linux)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        func = ctypes.CDLL(name, use_errno=True).fallocate
    except (OSError, AttributeError):
        return None
    func.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong]
    func.restype = ctypes.c_int
    return func


def first_kept(fd: int) -> int:
    """Offset of the first byte the log still holds: 0 when nothing was dropped, the length of
    the file when it holds nothing."""
    try:
        return os.lseek(fd, 0, os.SEEK_DATA)
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # no data at all: empty, or all dropped
            return os.fstat(fd).st_size
        return 0  # SEEK_DATA unknown here: nothing can have been dropped either


def keep_last(fd: int, keep_bytes: int) -> int | None:
    """Drop the oldest bytes of the file ``fd`` so that it holds at most ``keep_bytes`` (the
    whole blocks before them); the first byte kept after, or None when this filesystem cannot
    drop them (the caller cuts the log instead)."""
    size = os.fstat(fd).st_size
    start = first_kept(fd)
    if size - start <= keep_bytes:
        return start
    target = -(-(size - keep_bytes) // ALIGN) * ALIGN  # rounded up: at most keep_bytes stay
    target = min(target, size // ALIGN * ALIGN)
    if target <= start:
        return start
    func = _fallocate()
    if func is None:
        return None
    if func(fd, _PUNCH_HOLE | _KEEP_SIZE, 0, target) != 0:
        if ctypes.get_errno() in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
            return None
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    return target


def read_kept(fd: int, offset: int, max_bytes: int) -> tuple[int, bytes]:
    """Up to ``max_bytes`` from ``offset``, or from the first byte kept when ``offset`` was
    dropped: (bytes skipped over, bytes read)."""
    start = max(offset, first_kept(fd)) if offset < os.fstat(fd).st_size else offset
    return start - offset, os.pread(fd, max_bytes, start)
