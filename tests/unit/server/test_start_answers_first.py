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
from xpupool.server import rehearsal
from xpupool.server.app import create_app
from xpupool.server.up import solver_when_quiet


def test_the_loops_warm_up_once_the_app_starts_and_it_answers_meanwhile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    compiling, done = threading.Event(), threading.Event()

    asked: list[dict[str, object]] = []

    def slow_warm(**kwargs: object) -> None:  # a first start's compile, held until let go
        asked.append(kwargs)
        compiling.set()
        done.wait(30)

    monkeypatch.setattr(kernels, "warm", slow_warm)
    monkeypatch.setattr(rehearsal, "_loaded", threading.Event())  # as in a fresh process
    monkeypatch.setattr(rehearsal, "_rehearsed", frozenset())
    plane, _ = open_server(tmp_path, FakeClock())
    try:
        assert not compiling.wait(0.5), "the plane's opening warmed the loops up"
        with TestClient(create_app(plane)) as client:
            assert compiling.wait(10), "the app's start did not warm the loops up"
            assert client.get("/healthz").status_code == 200
            assert not done.is_set()
            done.set()
        assert asked == [{"solver": False}], "the LP solver's import came with the loops"
    finally:
        done.set()
        plane.db.dispose()


def test_the_solver_is_imported_at_the_first_quiet_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """The share prices' LP solver (SciPy) waits for a moment with no submission and none
    pending: beside the first placement it took half the interpreter's time."""
    imported = threading.Event()
    monkeypatch.setattr(kernels, "warm_solver", imported.set)
    answers = iter([False, False, True])
    asked: list[bool] = []

    def quiet() -> bool:
        asked.append(next(answers))
        return asked[-1]

    solver_when_quiet(quiet).join(30)
    assert imported.is_set()
    assert asked == [False, False, True]
