"""A server answers while the engine's loops load or compile: a first start compiles them all,
many seconds of CPU, and a warm start loads them from numba's cache, about a second
(docs/benchmarks.md, start-up). The plane used to wait for that before the HTTP server even
started, then to do it beside the start's imports and the plane's opening, slowing them; the app
starts it as it starts serving."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from server_kit import FakeClock, open_server

from xpupool.engine.fragmentation import kernels
from xpupool.server.app import create_app


def test_the_loops_warm_up_once_the_app_starts_and_it_answers_meanwhile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    compiling, done = threading.Event(), threading.Event()

    def slow_warm() -> None:  # a first start's compile, held until the test lets it go
        compiling.set()
        done.wait(30)

    monkeypatch.setattr(kernels, "warm", slow_warm)
    plane, _ = open_server(tmp_path, FakeClock())
    try:
        assert not compiling.wait(0.5), "the plane's opening warmed the loops up"
        with TestClient(create_app(plane)) as client:
            assert compiling.wait(10), "the app's start did not warm the loops up"
            assert client.get("/healthz").status_code == 200
            assert not done.is_set()
            done.set()
    finally:
        done.set()
        plane.db.dispose()
