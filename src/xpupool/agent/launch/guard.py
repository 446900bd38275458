"""The agent's (and ``xpupool up``'s) own process, made hard to read for the jobs it runs.

Two settings, applied first thing at start: a umask of 077, so every file the process creates
(database, its -wal/-shm, logs, tokens) is private from its first byte; and ``PR_SET_DUMPABLE``
0, so a process of the same uid (a job, when the agent is not root) can neither ptrace it nor
read its ``/proc/<pid>/environ``, ``mem`` or ``fd``: the kernel then treats those files as
root's. Without this, a job could read the agent token out of the agent's environment.
"""

from __future__ import annotations

import ctypes
import logging
import os
import stat
import sys
from pathlib import Path

log = logging.getLogger("xpupool.agent")

PR_SET_DUMPABLE = 4
PR_GET_DUMPABLE = 3
PRIVATE_UMASK = 0o077


def protect_process() -> bool:
    """umask 077 and not dumpable; True when the kernel took the dumpable setting (Linux)."""
    os.umask(PRIVATE_UMASK)
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        log.warning("could not mark the process non-dumpable: jobs of its uid may read its memory")
        return False


def dumpable() -> bool | None:
    """This process's dumpable flag (None off Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    return bool(ctypes.CDLL(None).prctl(PR_GET_DUMPABLE, 0, 0, 0, 0))


def make_private(data: Path) -> None:
    """Make an existing data directory private: the directory 0700, every file in it 0600
    (directories 0700), as a fresh one under umask 077 would be. For data dirs made by a release
    that created them 0755/0644."""
    if not data.exists():
        return
    for root, dirs, files in os.walk(data):
        here = Path(root)
        _chmod(here, 0o700)
        for name in files:
            _chmod(here / name, 0o600)
        for name in dirs:
            _chmod(here / name, 0o700)


def _chmod(path: Path, mode: int) -> None:
    try:
        st = path.lstat()
    except OSError:
        return
    if stat.S_ISLNK(st.st_mode) or stat.S_IMODE(st.st_mode) == mode:
        return
    try:
        os.chmod(path, mode)
    except OSError as exc:
        log.warning("cannot make %s private: %s", path, exc)


def read_token_file(path: Path) -> str:
    """The token in ``path`` (first line); warns when others may read the file."""
    st = path.stat()
    if st.st_mode & 0o077:
        log.warning(
            "token file %s is readable by others (mode %o): chmod 600 it", path, st.st_mode & 0o777
        )
    token = path.read_text().strip().splitlines()
    if not token or not token[0].strip():
        raise ValueError(f"{path}: empty")
    return token[0].strip()
