"""The meter never asks for the plane's lock while its transaction holds the store's write lock.

A scheduling pass holds the plane's lock and may wait for the store's write lock; a meter that
had written and then waited for the plane's lock would wait on the pass while the pass waits on
it, until the store-stall guard (``plane/store_stall.py``) refused, after 3 s, every request
waiting for the plane's lock (503 for API reads too). Seen as a restarted plane's API answering
503 in the Kubernetes sites' e2e (``test_plane_gated_e2e.py``). Here every way the meter takes
the plane's lock first checks, from a connection of its own, that the store's write lock is
free (SQLite: ``BEGIN IMMEDIATE`` with no wait)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any, TypeVar

from server_kit import Server, heartbeat, node, reopen, report, submit, tenant

from xpupool.catalog.power import PowerModel
from xpupool.server.usage.idle_power import DEFAULT_MIN_SAMPLES

T = TypeVar("T")


class Watched:
    """The plane as the meter sees it, noting each time it takes the plane's lock while the
    store's write lock is held by someone (the meter's own transaction: nothing else writes)."""

    def __init__(self, server: Server) -> None:
        self.plane = server.plane
        self.path = server.db_url.removeprefix("sqlite:///")
        self.held_while_writing: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.plane, name)

    def _check(self, what: str) -> None:
        probe = sqlite3.connect(self.path, timeout=0, isolation_level=None)
        try:
            probe.execute("BEGIN IMMEDIATE")
            probe.execute("ROLLBACK")
        except sqlite3.OperationalError:
            self.held_while_writing.append(what)
        finally:
            probe.close()

    def read(self, look: Callable[[], T]) -> T:
        self._check("read")
        return self.plane.read(look)

    def idle_power_readings(self) -> list[tuple[str, float]]:
        self._check("idle_power_readings")
        return self.plane.idle_power_readings()

    def use_power(self, power: PowerModel) -> None:
        self._check("use_power")
        self.plane.use_power(power)


def test_a_restarted_meter_closes_stale_records_without_the_plane_lock_under_a_write(
    server: Server,
) -> None:
    """A run recorded open, ended while no flush counted it, then a restart: the first flush
    closes its stale record (a write) and reads the plane (the held jobs, the cards' power)."""
    node(server, "n1", count=2)
    a = tenant(server, "a")
    j = submit(server, a, "A100:1")
    server.schedule()
    heartbeat(server, "n1")
    heartbeat(server, "n1", [report(j["id"], 0, "running")])
    server.clock.advance(60)
    server.plane.meter.flush(server.plane)
    heartbeat(server, "n1", [report(j["id"], 0, "succeeded", 0)])
    server = reopen(server)
    with server.client:
        watched = Watched(server)
        server.clock.advance(60)
        server.plane.meter.flush(watched)  # type: ignore[arg-type]
        server.clock.advance(60)
        server.plane.meter.flush(watched)  # type: ignore[arg-type]
    server.plane.db.dispose()
    assert watched.held_while_writing == []


def test_learning_idle_watts_stores_them_without_the_plane_lock_under_a_write(
    server: Server,
) -> None:
    """Idle cards' readings until a model's figure is learned: the flush stores the figure (a
    write), counts a held card's energy (the plane's readings) and hands the figure to the
    energy scorer (the plane's lock)."""
    node(server, "n1", count=4)
    a = tenant(server, "a")
    j = submit(server, a, "A100:1")
    server.schedule()
    heartbeat(server, "n1")
    heartbeat(server, "n1", [report(j["id"], 0, "running")])
    watched = Watched(server)
    for _ in range(-(-DEFAULT_MIN_SAMPLES // 3) + 1):
        body = {
            "node": "n1",
            "replicas": [],
            "metrics": [{"uuid": f"n1-gpu{i}", "power_w": 50.0} for i in range(4)],
        }
        r = server.client.post("/v1/agent/heartbeat", json=body, headers=server.admin)
        assert r.status_code == 200, r.text
        server.clock.advance(60)
        server.plane.meter.flush(watched)  # type: ignore[arg-type]
    assert server.plane.meter.idle.figures, "no idle figure learned: the test shows nothing"
    assert watched.held_while_writing == []
