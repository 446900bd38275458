"""The server's copies of the replicas' logs keep the disk's reserve free (issue 43, item 5): on a
real small filesystem, output that would take it is dropped with a line saying so, and kept again,
with a line saying how much was dropped, as soon as the disk has room; no request fails for it."""

from __future__ import annotations

from pathlib import Path

from small_disk import small_disk
from xpupool.disk_reserve import held_back_marker, kept_again_marker
from xpupool.server.job_logs import JobLogs, LogCaps

KIB, MIB = 1 << 10, 1 << 20
CAPS = LogCaps(job_bytes=64 * MIB, tenant_bytes=64 * MIB)


def test_output_under_the_reserve_is_dropped_until_the_disk_has_room(tmp_path: Path) -> None:
    with small_disk(tmp_path / "disk", "4m") as disk:
        logs = JobLogs(disk / "logs", 64 * MIB, reserve_bytes=1 * MIB)
        assert logs.reserve_bytes == 1 * MIB  # a quarter of this disk: as asked
        filler = disk / "filler"
        filler.write_bytes(b"\0" * (2560 * KIB))  # 1.5 MiB left: 0.5 MiB above the reserve
        start = logs.start(5, 0, "t", b"")
        logs.append(5, 0, "t", b"a" * (256 * KIB), CAPS, taken=256 * KIB)
        logs.append(5, 0, "t", b"b" * (512 * KIB), CAPS, taken=768 * KIB)  # would take it
        path = logs.path(5, 0)
        assert path.read_bytes() == b"a" * (256 * KIB) + held_back_marker(1 * MIB)
        assert logs.taken(5, 0, start) == 768 * KIB  # a resend of the dropped part adds nothing
        logs.append(5, 0, "t", b"c" * KIB, CAPS, taken=769 * KIB)  # this much has room
        logs.append(5, 0, "t", b"d" * (300 * KIB), CAPS, taken=1069 * KIB)  # this not
        assert path.read_bytes() == (
            b"a" * (256 * KIB)
            + held_back_marker(1 * MIB)
            + kept_again_marker(512 * KIB)
            + b"c" * KIB
            + held_back_marker(1 * MIB)
        )

        filler.unlink()  # room again: by hand here, by retention in a pool
        logs.append(5, 0, "t", b"e" * KIB, CAPS, taken=1070 * KIB)
        assert path.read_bytes().endswith(
            b"c" * KIB + held_back_marker(1 * MIB) + kept_again_marker(300 * KIB) + b"e" * KIB
        )
        assert logs.tenant_bytes("t") == path.stat().st_size


def test_a_log_the_disk_refuses_is_dropped_not_raised(tmp_path: Path) -> None:
    with small_disk(tmp_path / "disk", "1m") as disk:
        logs = JobLogs(disk / "logs", 64 * MIB, reserve_bytes=0)  # no reserve: the disk fills
        logs.start(6, 0, "t", b"")
        logs.append(6, 0, "t", b"x" * (2 * MIB), CAPS)  # more than the disk holds: no error
        (disk / "logs" / "6" / "0.log").unlink()
        logs.append(6, 0, "t", b"after\n", CAPS)
        assert logs.path(6, 0).read_bytes().endswith(b"bytes were discarded]\nafter\n")
