"""``xpupool up`` starts loading the engine's compiled loops, and rehearsing its ``--policy``, on
a thread before it opens the plane and builds the app (``server/up.py`` ``serve``): the first
scheduling pass waits for them, and when they started with the app the jobs submitted in the
first second waited with it (issue 42; docs/benchmarks.md, start-up)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

import xpupool.agent.launch.guard as guard
import xpupool.server.up as server_up


class OpenedError(Exception):
    """The test's plane "opened": the start ends there."""


def test_the_loops_warm_before_the_plane_opens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    warming = threading.Event()
    asked: list[str] = []

    def warm_loops(cfg: server_up.UpConfig) -> None:
        asked.append(cfg.profile)
        warming.set()

    def open_plane(_cfg: server_up.UpConfig, _owner: object) -> None:
        assert warming.wait(10), "the loops did not start warming before the plane opened"
        raise OpenedError

    monkeypatch.setattr(server_up, "warm_loops", warm_loops)
    monkeypatch.setattr(server_up, "open_plane", open_plane)
    monkeypatch.setattr(guard, "protect_process", lambda: None)  # not this test process's umask
    (tmp_path / "data").mkdir()
    with pytest.raises(OpenedError):
        server_up.serve(server_up.UpConfig(data=tmp_path / "data", profile="binpack"), print)
    assert asked == ["binpack"]
