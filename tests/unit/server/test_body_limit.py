"""The body size limit in front of the app (``server/body_limit.py``), in process: declared and
streamed sizes, before authentication, and the agent log route's own limit. The real server,
raw sockets and its memory are in tests/integration/test_hostile_input.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from server_kit import FakeClock, open_server

from xpupool.server.app import create_app
from xpupool.server.body_limit import parse_size

LIMIT = 1024


@pytest.fixture
def small(tmp_path: Path) -> Iterator[tuple[TestClient, str]]:
    """An app taking bodies of at most 1 KiB, and its admin token."""
    plane, token = open_server(tmp_path, FakeClock())
    assert token is not None
    with TestClient(create_app(plane, background=False, max_body=LIMIT)) as client:
        yield client, token
    plane.db.dispose()


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("1048576", 1 << 20),
        ("512Ki", 512 << 10),
        ("1Mi", 1 << 20),
        ("8M", 8_000_000),
        ("2GiB", 2 << 30),
    ],
)
def test_parse_size(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "1.5Mi", "-1", "1Ti", "lots"])
def test_parse_size_refuses_what_it_cannot_read(text: str) -> None:
    with pytest.raises(ValueError, match="512Ki"):
        parse_size(text)


def test_a_declared_size_over_the_limit_is_413_before_the_token(
    small: tuple[TestClient, str],
) -> None:
    client, _ = small
    r = client.post("/v1/jobs", content=b"x" * (LIMIT + 1), headers={"Content-Type": "text/plain"})
    assert r.status_code == 413
    assert r.json()["field"] == "body" and str(LIMIT) in r.json()["reason"]
    assert r.headers["connection"] == "close"
    r = client.post("/v1/jobs", json={"command": ["x"]})  # under the limit: the token is next
    assert r.status_code == 401


def test_a_streamed_body_is_counted_as_it_arrives(small: tuple[TestClient, str]) -> None:
    client, token = small

    def chunks() -> Iterator[bytes]:
        for _ in range(64):
            yield b"x" * 100

    r = client.post("/v1/jobs", content=chunks(), headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 413


def test_the_log_route_takes_a_full_chunk_whatever_the_limit(
    small: tuple[TestClient, str],
) -> None:
    client, token = small
    path = "/v1/agent/nodes/nowhere/jobs/1/replicas/0/logs"
    r = client.post(path, content=b"l" * (1 << 20), headers={"Authorization": f"Bearer {token}"})
    assert r.status_code != 413  # refused for what it is (no such replica), not for its size
    r = client.post(path, content=b"l" * (2 << 20), headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 413
