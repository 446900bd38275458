"""Switches that turn one piece of the server's performance machinery off, so that its benchmark
can measure it against its own removal in one command (``bench/machinery.py``, issue 44 part 8).

Each piece earns its place only by a figure: heap freezing (``server/heap_freeze.py``) by the
submit -> placed p99 at 5,000 nodes, the driver-level SQL (``storage/driver_insert.py``) by the
plane's CPU per submission. ``XPUPOOL_WITHOUT`` names the pieces to switch off, comma
separated (``heap-freeze``, ``driver-sql``); it is read once, at import, and nothing else reads
it. Current figures: docs/benchmarks.md.
"""

from __future__ import annotations

import os

PIECES = frozenset({"heap-freeze", "driver-sql"})
"""What ``XPUPOOL_WITHOUT`` may name."""


def _read(text: str) -> frozenset[str]:
    names = frozenset(part.strip() for part in text.split(",") if part.strip())
    unknown = sorted(names - PIECES)
    if unknown:
        raise ValueError(
            f"XPUPOOL_WITHOUT: unknown piece(s) {', '.join(unknown)}; known: {', '.join(sorted(PIECES))}"
        )
    return names


_OFF = _read(os.environ.get("XPUPOOL_WITHOUT", ""))


def off(piece: str) -> bool:
    """Whether ``piece`` (one of :data:`PIECES`) is switched off in this process."""
    assert piece in PIECES, piece
    return piece in _OFF
