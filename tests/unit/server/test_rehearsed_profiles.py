"""The placement rehearsal covers every profile the plane places with (server/rehearsal.py), not
only the default one: a standby rehearses its own ``--policy`` while it waits, and a plane whose
queues name a profile rehearses that one before a pass would place with it. Else its scorers'
loops compile inside a pass, under the plane's lock and on the event loop (issue 42's freeze).

The rehearsal itself is replaced by a recorder: what is checked is which profiles it is asked
for, in a process whose rehearsal state starts empty (as a fresh one's)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from server_kit import FakeClock, open_server

from xpupool.engine.fragmentation import kernels
from xpupool.server import rehearsal, up
from xpupool.server.app import create_app


@pytest.fixture
def rehearsed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The profiles rehearsed from here on, in order; the loops' loading is a no-op."""
    done: list[str] = []
    monkeypatch.setattr(rehearsal, "_loaded", threading.Event())
    monkeypatch.setattr(rehearsal, "_rehearsed", frozenset())
    monkeypatch.setattr(kernels, "warm", lambda **_: None)
    monkeypatch.setattr(kernels, "warm_solver", lambda: None)
    monkeypatch.setattr(rehearsal, "_rehearse", lambda name, _profiles: done.append(name))
    return done


def test_a_standby_rehearses_the_profile_it_will_run(
    tmp_path: Path, rehearsed: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(up, "freeze_start_heap", lambda: None)
    up.prepare_start(up.UpConfig(data=tmp_path, profile="binpack"))
    assert rehearsed == ["binpack"]
    assert rehearsal.ready(["binpack"]) and not rehearsal.ready(["binpack", "spread"])


def test_the_queues_profiles_are_rehearsed_before_a_pass_places_with_them(
    tmp_path: Path, rehearsed: list[str]
) -> None:
    plane, _ = open_server(tmp_path, FakeClock())
    try:
        rehearsal.warm([plane.profile])  # what a standby did while it waited
        plane.set_queue_profile("team", "binpack")  # read from the store at the take-over
        with TestClient(create_app(plane)) as client:
            assert client.get("/healthz").status_code == 200
            deadline = threading.Event()
            for _ in range(200):  # the app warms on a thread: wait for it (10 s at most)
                if rehearsal.ready(rehearsal.plane_profiles(plane)):
                    break
                deadline.wait(0.05)
        assert rehearsed == [plane.profile, "binpack"]
        assert rehearsal.plane_profiles(plane) == (plane.profile, "binpack")
    finally:
        plane.db.dispose()
