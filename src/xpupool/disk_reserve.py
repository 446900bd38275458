"""The free space job output may never take (``--log-reserve``): the disk that holds replica logs
also holds what must keep working when a job floods it (the store's database and WAL in
``xpupool up``'s data dir, the agent's run directories). Every writer of job output, the agent's
pipe into a replica's log and the server's copy of it, writes only while the filesystem keeps
more than the reserve free; below it the output is discarded (a marker line says from where, and
another how much once space returns), so no tenant's output can fill the disk and the writes
the plane needs always find room. Free space is asked of the kernel on each write (one
``statvfs``), so a disk freed by retention or by hand is used again at once, without a restart.

A filesystem smaller than four reserves keeps a quarter of itself instead: on a 20 MiB data dir
the default 64 MiB would leave no room for any log at all.
"""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_LOG_RESERVE = "64Mi"
DEFAULT_LOG_RESERVE_BYTES = 64 << 20
HELD_BACK_PREFIX = b"\n[xpupool: output discarded from here"


def size_text(n_bytes: int) -> str:
    """``64 MiB``, ``1.5 MiB``, or ``512 bytes``: what a marker line says."""
    if n_bytes >= 1 << 20:
        return f"{n_bytes / (1 << 20):.4g} MiB"
    return f"{n_bytes} bytes"


def _statvfs(where: Path | int) -> os.statvfs_result:
    return os.fstatvfs(where) if isinstance(where, int) else os.statvfs(where)


def reserve_on(where: Path | int, asked_bytes: int) -> int:
    """The reserve kept on the filesystem of ``where`` (a path or an open file): ``asked_bytes``,
    at most a quarter of that filesystem's size; 0 when ``asked_bytes`` is 0 (no reserve) or
    the filesystem cannot be asked."""
    if asked_bytes <= 0:
        return 0
    try:
        st = _statvfs(where)
    except OSError:
        return 0
    return min(asked_bytes, st.f_blocks * st.f_frsize // 4)


def free_bytes(where: Path | int) -> int | None:
    """Free space on the filesystem of ``where`` as an unprivileged writer sees it; None when
    it cannot be asked."""
    try:
        st = _statvfs(where)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def room_above(where: Path | int, reserve_bytes: int) -> int:
    """Bytes that may be written on the filesystem of ``where`` before its free space falls
    under ``reserve_bytes``; negative below it. A filesystem that cannot be asked has room: the
    write itself then says what is wrong."""
    free = free_bytes(where) if reserve_bytes > 0 else None
    return 1 << 62 if free is None else free - reserve_bytes


def held_back_marker(reserve_bytes: int) -> bytes:
    """The line a log gets where output starts being discarded for want of space."""
    return (
        HELD_BACK_PREFIX
        + f": the disk holding this log is down to its {size_text(reserve_bytes)} reserve of"
        " free space]\n".encode()
    )


def kept_again_marker(discarded_bytes: int) -> bytes:
    """The line a log gets where output is kept again once the disk has room."""
    return f"\n[xpupool: output kept again; {discarded_bytes} bytes were discarded]\n".encode()
