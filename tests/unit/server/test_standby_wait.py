"""The standby's wait (``server/standby.py``) in one process, on a real SQLite file: while
another owner holds the store, every request on its port is 503 naming that owner; once the
owner releases it, the standby holds the store and the port is free for the plane."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from xpupool.server.ownership import Identity, StoreOwnership
from xpupool.server.standby import wait_for_store

pytestmark = pytest.mark.slow  # a thread polling the store, an HTTP server, waits


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def until(check: Callable[[], Any], what: str, timeout_s: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            got = check()
        except httpx.TransportError:
            got = None
        if got:
            return got
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def test_the_standby_answers_503_until_the_owner_lets_go_then_frees_its_port(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'state.db'}"
    active = StoreOwnership(url, Identity("h", 1, "/a"), lease_s=10.0)
    active.claim()
    standby = StoreOwnership(url, Identity("h", 2, "/b"), lease_s=10.0)
    port = free_port()
    said: list[str] = []
    waiting = threading.Thread(
        target=wait_for_store,
        args=(standby, "127.0.0.1", port, said.append),
        kwargs={"poll_s": 0.05},
    )
    waiting.start()
    try:
        base = f"http://127.0.0.1:{port}"
        r = until(
            lambda: (lambda r: r if "owned by" in r.text else None)(httpx.get(f"{base}/healthz")),
            "the standby naming the owner",
        )
        assert r.status_code == 503 and "data dir /a, epoch 1" in r.text
        assert "stop that server" not in r.text  # the owner and its lease, not the advice
        posted = httpx.post(f"{base}/v1/jobs", json={"spec": "A100"})
        assert posted.status_code == 503 and posted.headers["Retry-After"] == "2"
        assert standby.epoch is None
        active.release()
        waiting.join(30)
        assert not waiting.is_alive() and standby.epoch == 2
        assert len([s for s in said if "owned by" in s]) == 1  # said once, not every poll
        with socket.socket() as s:  # the port is the plane's now (uvicorn binds as this does)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", port))
            s.listen()
    finally:
        standby.release()
        active.release()
