"""The in-process control plane the server tests drive, and small API builders over it.

A :class:`Server` is a real SQLite file in a temporary folder (or a real PostgreSQL database:
:data:`BOTH_STORES`), no background threads (each test calls ``schedule`` itself, so every
outcome is deterministic), and a clock the test moves by hand
(heartbeats, lost nodes and event timestamps without sleeping). The builders are plain functions
(STYLE.md section 6: factories, not fixture magic); each asserts the status it expects, so a failing
setup names the step that failed.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from fastapi.testclient import TestClient

from xpupool.engine.cycle.defrag import DisruptionBudget
from xpupool.server.app import create_app
from xpupool.server.datadir import open_pool
from xpupool.server.plane import ControlPlane, defrag_moves
from xpupool.server.scheduler_loop import run_passes, schedule_pass
from xpupool.server.services import tenants

LOOP_S = 30.0  # the longest a test's event loop may run, however slow the machine
T = TypeVar("T")


def run_loop(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)`` in a thread of its own: the browser tests' Playwright keeps a loop
    running in the main thread for the whole session, and one thread runs one loop."""
    out: list[T] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            out.append(asyncio.run(asyncio.wait_for(main, LOOP_S)))
        except BaseException as exc:  # raised again in the test's thread
            failed.append(exc)

    thread = threading.Thread(target=run, name="test-loop")
    thread.start()
    thread.join(2 * LOOP_S)
    if failed:
        raise failed[0]
    assert out, "the loop did not end"
    return out[0]


def passes_on_a_loop(plane: ControlPlane, until: Callable[[], bool]) -> None:
    """The server's scheduling passes (``run_passes``, woken now) on an event loop of their own
    until ``until()`` holds, then cancelled."""

    async def passes() -> None:
        plane.wake.set()
        task = asyncio.create_task(run_passes(plane, period_s=LOOP_S))
        while not until():
            await asyncio.sleep(0.01)
        task.cancel()

    run_loop(passes())


class FakeClock:
    """The plane's two clocks, moved by hand: the wall clock (``now``, seconds since the epoch,
    from a round number: what is stored and shown) and the monotonic one (``mono``: what
    liveness is timed with, ``ControlPlane(monotonic=...)``). ``advance`` moves both, as time
    passing does; ``step`` moves the wall clock alone, as an NTP step or ``date -s`` does."""

    def __init__(self, start: float = 1_000_000.0) -> None:
        self.now = start
        self.mono = 5_000.0  # monotonic time has no epoch: any start will do

    def __call__(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.mono

    def advance(self, seconds: float) -> None:
        self.now += seconds
        self.mono += seconds

    def step(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class Server:
    """One plane, its app and the admin's client; ``as_(token)`` gives a client for another token."""

    plane: ControlPlane
    client: TestClient
    admin_token: str
    clock: FakeClock
    db_url: str
    data: Path

    def as_(self, token: str | None) -> dict[str, str]:
        return {} if token is None else {"Authorization": f"Bearer {token}"}

    @property
    def admin(self) -> dict[str, str]:
        return self.as_(self.admin_token)

    def schedule(self) -> int:
        return schedule_pass(self.plane)


BOTH_STORES = ("sqlite", "postgresql")
"""A module's ``STORES``: each of its tests that takes ``server`` runs once on a SQLite file and
once on a real PostgreSQL (conftest.py's ``pytest_generate_tests``)."""


def open_server(
    data: Path, clock: FakeClock, url: str | None = None, **kwargs: object
) -> tuple[ControlPlane, str | None]:
    """A plane over ``data`` opened as ``xpupool up`` opens it: the pool's row first
    (``server/datadir.py``: the marks above every job and allocation id handed out), then the
    plane. ``url``: the store (None: ``data/state.db``); ``kwargs`` go to :class:`ControlPlane`."""
    url = url or f"sqlite:///{data / 'state.db'}"
    open_pool(data, url, reinitialise=False)
    plane = ControlPlane(url, data, clock=clock, monotonic=clock.monotonic, **kwargs)  # type: ignore[arg-type]
    return plane, tenants.ensure_admin_token(plane)


def reopen(srv: Server) -> Server:
    """A restart: a new plane (and app) over ``srv``'s store, on the same clock; ``srv``'s
    connections are closed first. Use the result's client in a ``with`` block, and dispose of
    its plane's database after it."""
    srv.plane.db.dispose()
    plane = ControlPlane(srv.db_url, srv.data, clock=srv.clock, monotonic=srv.clock.monotonic)
    client = TestClient(create_app(plane, background=False))
    return Server(plane, client, srv.admin_token, srv.clock, srv.db_url, srv.data)


@contextmanager
def reopened_defrag(srv: Server, budget: DisruptionBudget) -> Iterator[defrag_moves.PlaneDefrag]:
    """A restart (:func:`reopen`) with ``xpupool up --defrag`` on within ``budget``: its
    defragmentation, with the ledger it read back from the store."""
    again = reopen(srv)
    try:
        with again.client:
            defrag_moves.use(again.plane, budget, 1.0)
            mover = again.plane.defrag
            assert isinstance(mover, defrag_moves.PlaneDefrag)
            yield mover
    finally:
        again.plane.db.dispose()


A100 = "NVIDIA A100-SXM4-80GB"
L20 = "NVIDIA L20"


def tenant(srv: Server, name: str, weight: float = 1.0) -> str:
    """Create tenant ``name`` (and its default queue); return a tenant token for it."""
    r = srv.client.post("/v1/tenants", json={"name": name, "weight": weight}, headers=srv.admin)
    assert r.status_code == 201, r.text
    r = srv.client.post(f"/v1/tenants/{name}/tokens", json={"name": "t"}, headers=srv.admin)
    assert r.status_code == 201, r.text
    return str(r.json()["token"])


def queue(
    srv: Server,
    name: str,
    owner: str,
    quotas: list[dict[str, Any]],
    cohort: str | None = None,
    max_priority: int = 0,
    preemption: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    body = {
        "name": name,
        "tenant": owner,
        "quotas": quotas,
        "cohort": cohort,
        "max_priority": max_priority,
    }
    if preemption is not None:
        body["preemption"] = preemption
    body.update(extra)
    r = srv.client.put(f"/v1/queues/{name}", json=body, headers=srv.admin)
    assert r.status_code == 200, r.text
    return dict(r.json())


def node_body(
    name: str,
    count: int = 8,
    model: str = A100,
    memory_mib: int = 81920,
    vendor: str = "nvidia",
    runtime: str | None = None,
) -> dict[str, Any]:
    return {
        "name": name,
        **({"runtime": runtime} if runtime is not None else {}),
        "cpu_milli": 128_000,
        "memory_mib": 1 << 20,
        "devices": [
            {
                "uuid": f"{name}-gpu{i}",
                "vendor": vendor,
                "model": model,
                "memory_mib": memory_mib,
                "index": i,
                "driver_version": "550.54.15",
                "runtimes": {"cuda": "12.4"},
            }
            for i in range(count)
        ],
    }


def node(srv: Server, name: str, **kwargs: Any) -> dict[str, Any]:
    """Register an agent node through the API (admin token)."""
    r = srv.client.post("/v1/agent/register", json=node_body(name, **kwargs), headers=srv.admin)
    assert r.status_code == 200, r.text
    return dict(r.json())


def submit(srv: Server, token: str, spec: str | None = None, **body: Any) -> dict[str, Any]:
    if spec is not None:
        body["spec"] = spec
    if "image" not in body:
        body.setdefault("command", ["true"])  # a job runs a command, an image, or both
    r = srv.client.post("/v1/jobs", json=body, headers=srv.as_(token))
    assert r.status_code == 201, r.text
    return dict(r.json())


def job(srv: Server, job_id: int, token: str | None = None) -> dict[str, Any]:
    r = srv.client.get(f"/v1/jobs/{job_id}", headers=srv.as_(token or srv.admin_token))
    assert r.status_code == 200, r.text
    return dict(r.json())


def states(srv: Server, job_id: int) -> list[str]:
    return [e["state"] for e in job(srv, job_id)["events"]]


def heartbeat(
    srv: Server, node_name: str, replicas: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    body = {"node": node_name, "replicas": replicas or []}
    r = srv.client.post("/v1/agent/heartbeat", json=body, headers=srv.admin)
    assert r.status_code == 200, r.text
    return dict(r.json())


def report(job_id: int, replica: int, state: str, exit_code: int | None = None) -> dict[str, Any]:
    return {"job_id": job_id, "replica": replica, "state": state, "exit_code": exit_code}


def devices(srv: Server, node_name: str | None = None) -> list[dict[str, Any]]:
    params = {} if node_name is None else {"node": node_name}
    r = srv.client.get("/v1/devices", params=params, headers=srv.admin)
    assert r.status_code == 200, r.text
    return list(r.json())


def queue_used(srv: Server, name: str) -> dict[tuple[str, str], int]:
    r = srv.client.get(f"/v1/queues/{name}", headers=srv.admin)
    assert r.status_code == 200, r.text
    return {(q["flavor"], q["resource"]): q["used"] for q in r.json()["quotas"]}


def row_counts(srv: Server) -> dict[str, int]:
    """Rows per table, to show that a refused input stored nothing; the audit log is left out:
    recording the refusal is its job (docs/security.md)."""
    from sqlalchemy import func, select

    from xpupool.server.storage.meta import metadata

    with srv.plane.db.connect() as conn:
        return {
            name: int(conn.execute(select(func.count()).select_from(table)).scalar_one())
            for name, table in metadata.tables.items()
            if name != "audit"
        }


def two_tenants_ran(srv: Server) -> tuple[str, str]:
    """Metering's fixture (issue 52): on node n1 (two A100s), tenant a's job ran 2 h and ended,
    tenant b's has run 2.5 h and still runs; the meter flushed. Returns (a's, b's) tokens."""
    node(srv, "n1", count=2)
    a, b = tenant(srv, "a"), tenant(srv, "b")
    ja = submit(srv, a, "A100:1")["id"]
    jb = submit(srv, b, "A100:1")["id"]
    srv.schedule()
    heartbeat(srv, "n1")
    heartbeat(srv, "n1", [report(ja, 0, "running"), report(jb, 0, "running")])
    srv.clock.advance(7200)
    heartbeat(srv, "n1", [report(ja, 0, "succeeded", 0), report(jb, 0, "running")])
    srv.clock.advance(1800)
    srv.plane.meter.flush(srv.plane)
    return a, b
