"""A replica's log on the agent keeps the disk's reserve free (issue 43, item 5): a real pipe into
a real small filesystem. Output that would take the reserve is read and discarded (the job is
never blocked), with a line saying so; once the disk has room it is kept again, with a line
saying how much was discarded."""

from __future__ import annotations

import os
import time
from pathlib import Path

from small_disk import free_bytes, small_disk
from xpupool.agent.launch.logpipe import LogPump
from xpupool.disk_reserve import held_back_marker, kept_again_marker

KIB, MIB = 1 << 10, 1 << 20


def test_output_that_would_take_the_reserve_is_discarded_until_there_is_room(
    tmp_path: Path,
) -> None:
    with small_disk(tmp_path / "disk", "4m") as disk:
        filler = disk / "filler"
        filler.write_bytes(b"\0" * (2560 * KIB))  # 1.5 MiB free: 0.5 MiB above the reserve
        read_fd, write_fd = os.pipe()
        pump = LogPump(read_fd, disk / "output.log", 64 * MIB, reserve_bytes=1 * MIB)
        for _ in range(32):  # 2 MiB: written whole, the pump reads and discards what it can't keep
            os.write(write_fd, b"x" * (64 * KIB))
        marker = len(held_back_marker(1 * MIB))
        until = time.monotonic() + 10  # the pump has read all of it (the last in the pipe too)
        while (pump.held or 0) + pump.written - marker < 2 * MIB and time.monotonic() < until:
            time.sleep(0.01)
        assert free_bytes(disk) >= 1 * MIB - 4 * KIB  # the reserve is left (but for the marker)
        filler.unlink()
        os.write(write_fd, b"after\n")
        os.close(write_fd)
        pump.join(10)
        assert pump.done()
        data = (disk / "output.log").read_bytes()
        kept = data.index(held_back_marker(1 * MIB))
        assert 0 < kept <= 512 * KIB and data[:kept] == b"x" * kept
        assert data[kept:] == (
            held_back_marker(1 * MIB) + kept_again_marker(2 * MIB - kept) + b"after\n"
        )
