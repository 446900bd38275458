"""Fixtures for the server tests: a fresh in-process plane per test (see ``server_kit``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from server_kit import FakeClock, Server, open_server

from postgres import store_param
from xpupool.server.app import create_app


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A module's ``STORES`` (server_kit.BOTH_STORES) runs each test taking ``server`` once per
    store; its other tests once."""
    stores = getattr(metafunc.module, "STORES", None)
    if stores and "server" in metafunc.fixturenames:
        metafunc.parametrize("server", [store_param(s) for s in stores], indirect=True)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def server(request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock) -> Iterator[Server]:
    """A fresh plane with an admin token, no nodes and no tenants, on a SQLite file; a module
    runs its tests on PostgreSQL too with ``STORES = BOTH_STORES`` (server_kit)."""
    store = getattr(request, "param", "sqlite")
    url = (
        f"sqlite:///{tmp_path / 'state.db'}"
        if store == "sqlite"
        else str(request.getfixturevalue("pg_url"))
    )
    plane, token = open_server(tmp_path, clock, heartbeat_s=5.0, lost_after_s=30.0, url=url)
    assert token is not None
    client = TestClient(create_app(plane, background=False))
    with client:
        yield Server(plane, client, token, clock, url, tmp_path)
    plane.db.dispose()
