"""Fixtures for the server tests: a fresh in-process plane per test (see ``server_kit``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from server_kit import FakeClock, Server, open_server

from xpupool.server.app import create_app


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def server(tmp_path: Path, clock: FakeClock) -> Iterator[Server]:
    """A fresh plane with an admin token, no nodes and no tenants."""
    plane, token = open_server(tmp_path, clock, heartbeat_s=5.0, lost_after_s=30.0)
    assert token is not None
    client = TestClient(create_app(plane, background=False))
    with client:
        yield Server(plane, client, token, clock, f"sqlite:///{tmp_path / 'state.db'}", tmp_path)
    plane.db.dispose()
