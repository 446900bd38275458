"""What a volume holds (agent/volume_usage.py), on real files: bytes as ``du`` counts them, a hard
link once, a link never followed, and a bounded walk reported as incomplete."""

from __future__ import annotations

import os
from pathlib import Path

from xpupool.agent.volume_usage import measure


def _blocks(path: Path) -> int:
    return path.stat().st_blocks * 512


def test_bytes_on_disk_links_not_followed_hard_links_once(tmp_path: Path) -> None:
    vol = tmp_path / "vol"
    (vol / "sub").mkdir(parents=True)
    data = vol / "sub" / "data.bin"
    data.write_bytes(os.urandom(256 * 1024))
    os.link(data, vol / "again.bin")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "big.bin").write_bytes(os.urandom(1024 * 1024))
    (vol / "link").symlink_to(outside)
    got = measure(str(vol))
    assert got.complete
    expected = _blocks(data) + _blocks(vol / "sub") + (vol / "link").lstat().st_blocks * 512
    assert got.bytes == expected
    assert got.bytes < 1024 * 1024  # the link's target is not counted


def test_a_walk_past_its_bound_says_so(tmp_path: Path) -> None:
    for i in range(50):
        (tmp_path / f"f{i}").write_bytes(b"x" * 10)
    got = measure(str(tmp_path), max_entries=10)
    assert not got.complete
    assert measure(str(tmp_path / "missing")).bytes == 0
