"""A server answers while the engine's loops compile: a first start compiles them all, many
seconds of CPU (docs/benchmarks.md, start-up), and the plane used to wait for that before the
HTTP server even started."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from server_kit import FakeClock, open_server

from xpupool.engine.fragmentation import kernels


def test_the_plane_opens_while_the_loops_are_still_compiling(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    compiling, done = threading.Event(), threading.Event()

    def slow_warm() -> None:  # a first start's compile, held until the test lets it go
        compiling.set()
        done.wait(30)

    monkeypatch.setattr(kernels, "warm", slow_warm)
    opened: list[object] = []
    opener = threading.Thread(target=lambda: opened.append(open_server(tmp_path, FakeClock())))
    opener.start()
    try:
        opener.join(10)
        assert compiling.wait(10)
        assert opened, "the plane waited for the loops to compile before it opened"
    finally:
        done.set()
        opener.join(30)
    plane, _ = opened[0]  # type: ignore[misc]
    plane.db.dispose()  # type: ignore[attr-defined]
