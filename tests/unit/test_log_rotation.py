"""``xpupool/log_rotation.py``: a log keeps its last N bytes in place, its offsets unchanged, and
a reader at a dropped offset is moved to the oldest byte kept and told how many it skipped."""

from __future__ import annotations

import os
from pathlib import Path

from xpupool.log_rotation import ALIGN, first_kept, keep_last, read_kept


def test_the_oldest_bytes_go_and_offsets_stay(tmp_path: Path) -> None:
    path = tmp_path / "out.log"
    data = b"".join(b"%07d\n" % i for i in range(10_000))  # 80 000 bytes
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, data)
        assert first_kept(fd) == 0 and keep_last(fd, 100_000) == 0  # under: nothing goes
        start = keep_last(fd, 20_000)
        assert start is not None and start % ALIGN == 0
        assert 20_000 - ALIGN < len(data) - start <= 20_000
        assert first_kept(fd) == start and os.fstat(fd).st_size == len(data)
        assert keep_last(fd, 20_000) == start  # again: nothing more
        os.write(fd, b"more\n")  # appends at the end, as before
        assert os.fstat(fd).st_size == len(data) + 5
    finally:
        os.close(fd)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert read_kept(fd, 0, 10) == (start, data[start : start + 10])
        assert read_kept(fd, start + 3, 4) == (0, data[start + 3 : start + 7])
        assert read_kept(fd, len(data), 100) == (0, b"more\n")
        assert read_kept(fd, len(data) + 5, 100) == (0, b"")
    finally:
        os.close(fd)


def test_an_empty_log_keeps_nothing_and_drops_nothing(tmp_path: Path) -> None:
    fd = os.open(tmp_path / "empty.log", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        assert first_kept(fd) == 0 and keep_last(fd, 0) == 0
    finally:
        os.close(fd)
