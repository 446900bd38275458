"""The server runs its scheduling passes on the event loop that serves the API, not on a thread
(issue 25: two busy threads of one interpreter spent as much CPU handing the GIL over as on the
work): a submission wakes the loop, any thread may wake it, the loop serves what came during a
batch before the next one, and shutting down ends the passes between two batches."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

import pytest
from fastapi.testclient import TestClient
from server_kit import Server, job, node, passes_on_a_loop, run_loop, submit, tenant

from xpupool.server import scheduler_loop
from xpupool.server.app import create_app
from xpupool.server.plane import ControlPlane, PendingJob, scheduling_pass
from xpupool.server.wake import Wake

SMALL = "A100 mem=1Gi cores=1%"
LONG_S = 30.0  # a timeout no wait here may reach, however slow the machine


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


@pytest.mark.slow
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
    real = scheduling_pass._try_admit

    def tried(plane: ControlPlane, conn: object, writes: object, p: PendingJob) -> bool:
        order.append(p.id)
        if p.id == ids[0]:  # a request comes in during the first batch
            asyncio.get_running_loop().call_soon(order.append, "served")
        return real(plane, conn, writes, p)  # type: ignore[arg-type]

    monkeypatch.setattr(scheduling_pass, "_try_admit", tried)

    passes_on_a_loop(server.plane, until=lambda: len(order) == 4)
    assert order == [ids[0], "served", ids[1], ids[2]]
    assert all(job(server, i)["state"] == "scheduled" for i in ids)


def wait_until(check: Callable[[], bool]) -> bool:
    deadline = time.monotonic() + LONG_S
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


@pytest.mark.slow
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
        with plane.locked():
            return plane.queued[job_id].tried

    with TestClient(create_app(plane)) as client:
        r = client.post("/v1/jobs", json={"spec": "A100:8", "command": ["true"]}, headers=lab)
        assert r.status_code == 201, r.text
        whole = r.json()["id"]
        assert wait_until(lambda: job(server, whole)["state"] == "scheduled")
        r = client.post("/v1/jobs", json={"spec": "A100:1", "command": ["true"]}, headers=lab)
        waits = r.json()["id"]  # no card is free: tried once, then again only when woken
        assert wait_until(lambda: tried(waits) == plane.capacity_gen)
        with plane.locked():
            plane.bump()  # from this thread
            gen = plane.capacity_gen
        assert wait_until(lambda: tried(waits) == gen)
        assert job(server, waits)["state"] == "pending"
    assert not any(t.name == "xpupool-scheduler" for t in threading.enumerate())
