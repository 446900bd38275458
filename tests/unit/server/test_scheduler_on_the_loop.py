"""The server runs its scheduling passes on the event loop that serves the API, not on a thread
(issue 25: two busy threads of one interpreter spent as much CPU handing the GIL over as on the
work): a submission wakes the loop, any thread may wake it, the loop serves what came during a
batch before the next one, and shutting down ends the passes between two batches."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import pytest
from fastapi.testclient import TestClient
from server_kit import Server, job, node, submit, tenant

from xpupool.server import scheduler_loop
from xpupool.server.app import create_app
from xpupool.server.plane import ControlPlane, PendingJob
from xpupool.server.wake import Wake

SMALL = "A100 mem=1Gi cores=1%"
LONG_S = 30.0  # a timeout no wait here may reach, however slow the machine
T = TypeVar("T")


def run_loop(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)`` in a thread of its own: the browser tests' Playwright keeps a loop
    running in the main thread for the whole session, and one thread runs one loop."""
    out: list[T] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            out.append(asyncio.run(main))
        except BaseException as exc:  # raised again in the test's thread
            failed.append(exc)

    thread = threading.Thread(target=run, name="test-loop")
    thread.start()
    thread.join(2 * LONG_S)
    if failed:
        raise failed[0]
    assert out, "the loop did not end"
    return out[0]


def test_a_wake_set_from_another_thread_ends_the_wait_at_once() -> None:
    wake = Wake()

    async def waited() -> float:
        threading.Timer(0.05, wake.set).start()
        started = time.monotonic()
        await wake.wait(LONG_S)
        return time.monotonic() - started

    assert run_loop(waited()) < LONG_S / 2
    assert not wake.is_set()  # cleared: the pass that follows sees what set it


def test_a_wake_set_before_the_wait_ends_it_at_once_and_none_waits_out_its_timeout() -> None:
    wake = Wake()
    wake.set()  # before any loop waits (a submission before the passes start)
    assert wake.is_set()

    async def waits() -> tuple[float, float]:
        started = time.monotonic()
        await wake.wait(LONG_S)
        first = time.monotonic() - started
        started = time.monotonic()
        await wake.wait(0.05)  # nothing set it since
        return first, time.monotonic() - started

    first, second = run_loop(waits())
    assert first < LONG_S / 2
    assert 0.04 < second < LONG_S / 2


def test_the_loop_serves_what_came_during_a_batch_before_the_next_batch(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request that arrives while a batch runs is ready on the loop when the batch ends; it
    runs before the pass's next batch, as a submission waiting for the lock did when the passes
    had a thread. Without that the loop would serve nothing until the whole pass ended."""
    monkeypatch.setattr(scheduler_loop, "BATCH_JOBS", 1)
    node(server, "n1")
    lab = tenant(server, "lab")
    ids = [submit(server, lab, SMALL)["id"] for _ in range(3)]
    order: list[object] = []
    real = scheduler_loop._try_admit

    def tried(plane: ControlPlane, conn: object, writes: object, p: PendingJob) -> bool:
        order.append(p.id)
        if p.id == ids[0]:  # a request comes in during the first batch
            asyncio.get_running_loop().call_soon(order.append, "served")
        return real(plane, conn, writes, p)  # type: ignore[arg-type]

    monkeypatch.setattr(scheduler_loop, "_try_admit", tried)

    async def one_pass() -> None:
        passes = asyncio.create_task(scheduler_loop.run_passes(server.plane, period_s=LONG_S))
        while len(order) < 4:
            await asyncio.sleep(0.01)
        passes.cancel()

    run_loop(asyncio.wait_for(one_pass(), LONG_S))
    assert order == [ids[0], "served", ids[1], ids[2]]
    assert all(job(server, i)["state"] == "scheduled" for i in ids)


def test_a_write_from_a_thread_goes_between_two_batches_on_the_loop(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The agent inside ``up`` and the lost-node watch write from threads; the loop takes the
    lock again at once after a batch, so it waits, off the loop, for the writes already waiting."""
    monkeypatch.setattr(scheduler_loop, "BATCH_JOBS", 1)
    monkeypatch.setattr(scheduler_loop, "YIELD_S", LONG_S)
    node(server, "n1")
    lab = tenant(server, "lab")
    first, second = (submit(server, lab, SMALL)["id"] for _ in range(2))
    order: list[object] = []
    real = scheduler_loop._try_admit

    def write() -> None:
        with server.plane.write():
            order.append("write")

    waiter = threading.Thread(target=write, name="waiter")

    def tried(plane: ControlPlane, conn: object, writes: object, p: PendingJob) -> bool:
        order.append(p.id)
        if p.id == first:  # a thread's write comes during the first batch
            waiter.start()
            while plane.writers_waiting == 0:
                time.sleep(0.001)
        return real(plane, conn, writes, p)  # type: ignore[arg-type]

    monkeypatch.setattr(scheduler_loop, "_try_admit", tried)

    async def one_pass() -> None:
        passes = asyncio.create_task(scheduler_loop.run_passes(server.plane, period_s=LONG_S))
        while len(order) < 3:
            await asyncio.sleep(0.01)
        passes.cancel()

    run_loop(asyncio.wait_for(one_pass(), LONG_S))
    waiter.join(LONG_S)
    assert order == [first, "write", second]


def wait_until(check: Callable[[], bool]) -> bool:
    deadline = time.monotonic() + LONG_S
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_the_app_schedules_on_its_loop_when_a_submission_or_another_thread_wakes_it(
    server: Server,
) -> None:
    """The app with its background passes (as ``xpupool up`` runs it): nothing calls a pass by
    hand. A submission wakes the loop from the loop; a capacity change wakes it from this
    thread (the app's loop runs in another); both are seen long before the periodic pass."""
    node(server, "n1")
    lab = server.as_(tenant(server, "lab"))
    plane = server.plane

    def tried(job_id: int) -> int:
        with plane.lock:
            return plane.queued[job_id].tried

    with TestClient(create_app(plane)) as client:
        r = client.post("/v1/jobs", json={"spec": "A100:8", "command": ["true"]}, headers=lab)
        assert r.status_code == 201, r.text
        whole = r.json()["id"]
        assert wait_until(lambda: job(server, whole)["state"] == "scheduled")
        r = client.post("/v1/jobs", json={"spec": "A100:1", "command": ["true"]}, headers=lab)
        waits = r.json()["id"]  # no card is free: tried once, then again only when woken
        assert wait_until(lambda: tried(waits) == plane.capacity_gen)
        with plane.lock:
            plane.bump()  # from this thread
            gen = plane.capacity_gen
        assert wait_until(lambda: tried(waits) == gen)
        assert job(server, waits)["state"] == "pending"
    assert not any(t.name == "xpupool-scheduler" for t in threading.enumerate())
