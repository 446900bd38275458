"""A small filesystem of its own for a test: a tmpfs mounted on a folder (the tests run as root),
so that "the disk is full" is the kernel's answer, not a mock's. Unmounted lazily on the way
out: a replica's supervisor may hold a log there open for a moment longer."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def small_disk(where: Path, size: str) -> Iterator[Path]:
    """``where`` (created) as a tmpfs of ``size`` (``20m``, ``4m``), mode 0700, for the block."""
    where.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(where)])
    assert os.path.ismount(where), f"could not mount a tmpfs on {where} (the test needs root)"
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize
