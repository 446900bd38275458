"""A scheduling pass writes its placements in batches: one store transaction (and one hold of the
plane's lock) for several jobs, not one per job, and one statement per kind of row for the
batch's placements (issue 25); a write waiting for the lock goes between two batches; a batch
that fails part-way leaves nothing of itself, in the store or in memory."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from server_kit import (
    BOTH_STORES,
    Server,
    job,
    node,
    passes_on_a_loop,
    reopen,
    states,
    submit,
    tenant,
)
from sqlalchemy import event

from xpupool.server import scheduler_loop
from xpupool.server.plane import ControlPlane, PendingJob, scheduling_pass
from xpupool.server.storage import driver_insert

STORES = BOTH_STORES  # its tests' server on SQLite and on PostgreSQL (conftest.py)

SMALL = "A100 mem=1Gi cores=1%"


@contextmanager
def listening(plane: ControlPlane, name: str, listener: Callable[..., None]) -> Iterator[None]:
    """``listener`` hears the store's event ``name`` while the block runs."""
    event.listen(plane.db, name, listener)
    try:
        yield
    finally:
        event.remove(plane.db, name, listener)


def commits_during(plane: ControlPlane, run: Callable[[], object]) -> int:
    """How many transactions the store commits while ``run()`` runs."""
    count = 0

    def counted(_conn: object) -> None:
        nonlocal count
        count += 1

    with listening(plane, "commit", counted):
        run()
    return count


@pytest.mark.slow
def test_a_pass_commits_its_placements_in_batches(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scheduler_loop, "BATCH_S", 60.0)  # batches end by count only here
    node(server, "n1")
    lab = tenant(server, "lab")
    jobs = [submit(server, lab, SMALL)["id"] for _ in range(40)]
    placed: list[int] = []
    commits = commits_during(server.plane, lambda: placed.append(server.schedule()))
    assert placed == [40]
    assert commits == -(-40 // scheduler_loop.BATCH_JOBS)  # 2 batches of at most 32
    assert all(job(server, i)["state"] == "scheduled" for i in jobs)


@pytest.mark.slow
def test_a_batch_that_fails_part_way_leaves_nothing_of_itself(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scheduler_loop, "BATCH_S", 60.0)
    node(server, "n1")
    lab = tenant(server, "lab")
    jobs = [submit(server, lab, SMALL)["id"] for _ in range(5)]
    real = scheduling_pass._record_placement
    recorded: list[int] = []

    def third_fails(
        plane: ControlPlane, conn: object, writes: object, p: PendingJob, outcome: object
    ) -> None:
        if len(recorded) == 2:
            raise RuntimeError("a bug while recording the third placement")
        recorded.append(p.id)
        real(plane, conn, writes, p, outcome)  # type: ignore[arg-type]

    monkeypatch.setattr(scheduling_pass, "_record_placement", third_fails)
    with pytest.raises(RuntimeError):
        server.schedule()
    plane = server.plane
    assert len(recorded) == 2  # two were placed in memory before the failure
    assert sorted(plane.queued) == jobs and not plane.held_jobs  # ... and are pending again
    state = plane.cluster_state  # the engine holds nothing
    assert (state.dev_mem_free == state.dev_mem_commit).all()
    assert all(job(server, i)["state"] == "pending" for i in jobs)
    monkeypatch.setattr(scheduling_pass, "_record_placement", real)
    assert server.schedule() == 5


class SlowToWake:
    """The plane's lock, but the thread named ``waiter`` starts taking it only after a while:
    as a loaded machine that runs a waiting thread late, while the pass could take it again."""

    def __init__(self, lock: object) -> None:
        self.lock = lock

    def acquire(self, timeout: float = -1) -> bool:
        if threading.current_thread().name == "waiter":
            time.sleep(0.2)
        return bool(self.lock.acquire(timeout=timeout))  # type: ignore[attr-defined]

    def release(self) -> None:
        self.lock.release()  # type: ignore[attr-defined]

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *_exc: object) -> None:
        self.release()


@pytest.mark.parametrize("driver", ["schedule_pass", "run_passes"])
@pytest.mark.slow
def test_a_write_waiting_for_the_lock_goes_between_two_batches(
    server: Server, monkeypatch: pytest.MonkeyPatch, driver: str
) -> None:
    """The lock is not fair, and a waiting thread may run late: without waiting for it, a pass
    would take the lock again after each batch and keep a submission waiting for all of them.
    The same holds on the server's event loop (``run_passes``), which waits for the threads' writes
    (the agent inside ``up``, the lost-node watch) off the loop."""
    monkeypatch.setattr(scheduler_loop, "BATCH_JOBS", 1)
    monkeypatch.setattr(scheduler_loop, "YIELD_S", 60.0)  # however slow the machine
    node(server, "n1")
    lab = tenant(server, "lab")
    first, second = (submit(server, lab, SMALL)["id"] for _ in range(2))
    monkeypatch.setattr(server.plane._lock, "mutex", SlowToWake(server.plane._lock.mutex))
    order: list[object] = []
    real = scheduling_pass._try_admit

    def write() -> None:
        with server.plane.write():
            order.append("write")

    waiter = threading.Thread(target=write, name="waiter")

    def tried(plane: ControlPlane, conn: object, writes: object, p: PendingJob) -> bool:
        order.append(p.id)
        if not waiter.is_alive() and p.id == first:  # a write comes during the first batch
            waiter.start()
            while plane.writers_waiting == 0:
                time.sleep(0.001)
        return real(plane, conn, writes, p)  # type: ignore[arg-type]

    monkeypatch.setattr(scheduling_pass, "_try_admit", tried)
    if driver == "schedule_pass":
        assert server.schedule() == 2
    else:
        passes_on_a_loop(server.plane, until=lambda: len(order) == 3)
    waiter.join(10)
    assert order == [first, "write", second]


@pytest.mark.slow
def test_a_pass_sleeps_until_the_waiting_write_is_in_not_until_its_timeout(
    server: Server,
) -> None:
    """Between batches the pass waits for the writes queued on the lock with one sleep that the
    last of them ends when it gets the lock (a poll woke the pass every 0.1 ms, each wake taking
    the GIL from the threads it waited for): it wakes while the write still holds the lock, long
    before its 30 s timeout."""
    plane = server.plane
    has_lock, release = threading.Event(), threading.Event()

    def write() -> None:
        with plane.write():
            has_lock.set()
            release.wait(30)

    waiter = threading.Thread(target=write, name="waiter")
    with plane.locked():
        waiter.start()
        while plane.writers_waiting == 0:
            time.sleep(0.001)
    started = time.monotonic()
    try:
        assert plane.wait_for_writers(30.0)
        assert has_lock.is_set() and not release.is_set()  # woke as the write got in
        assert time.monotonic() - started < 15  # not the timeout
    finally:
        release.set()
        waiter.join(10)
    assert plane.wait_for_writers(0.0)  # none waiting: at once


def statements_during(plane: ControlPlane, run: Callable[[], object]) -> list[str]:
    """The SQL the store runs while ``run()`` runs, through SQLAlchemy or on the driver's cursor
    (``storage/driver_insert.py``), one entry per statement (many rows written by one
    ``executemany`` are one entry)."""
    seen: list[str] = []

    def short(sql: str) -> str:
        return sql.split(" (")[0].split(" SET")[0].split(" WHERE")[0]

    def counted(_conn: object, _cursor: object, sql: str, *_rest: object) -> None:
        seen.append(short(sql))

    on_the_driver = driver_insert._run

    def through_driver(conn: Any, compiled: Any, rows: Any) -> None:
        seen.append(short(compiled.sql))
        on_the_driver(conn, compiled, rows)

    driver_insert._run = through_driver
    try:
        with listening(plane, "before_cursor_execute", counted):
            run()
    finally:
        driver_insert._run = on_the_driver
    return seen


@pytest.mark.slow
def test_a_batch_writes_its_placements_in_one_statement_per_kind(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ten placements wrote 50 statements (two row updates, two events and the allocations
    each): through SQLAlchemy each cost more CPU than SQLite took to run it (issue 25)."""
    monkeypatch.setattr(scheduler_loop, "BATCH_S", 60.0)
    node(server, "n1")
    lab = tenant(server, "lab")
    jobs = [submit(server, lab, SMALL)["id"] for _ in range(10)]
    placed: list[int] = []
    sql = statements_during(server.plane, lambda: placed.append(server.schedule()))
    assert placed == [10]
    # ... and the pool's allocation mark once for the batch, in its transaction (issue 43)
    assert sorted(sql) == [
        "INSERT INTO allocations",
        "INSERT INTO job_events",
        "UPDATE jobs",
        "UPDATE pool",
    ]
    for i in jobs:  # ... and stored what one statement each stored
        stored = job(server, i)
        assert stored["state"] == "scheduled" and stored["flavor"] is not None
        assert stored["reason"] == "on n1"
        assert [e["state"] for e in stored["events"]] == ["pending", "admitted", "scheduled"]
    held = {j.id: j.allocations for j in server.plane.held_jobs.values()}
    assert sorted(held) == jobs
    again = reopen(server)  # a restart reads the same allocations back
    try:
        with again.client:
            assert {j.id: j.allocations for j in again.plane.held_jobs.values()} == held
    finally:
        again.plane.db.dispose()


@pytest.mark.slow
def test_a_batch_stores_why_a_job_waits_beside_its_placements(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scheduler_loop, "BATCH_S", 60.0)
    node(server, "n1", count=1)
    lab = tenant(server, "lab")
    fits = submit(server, lab, "A100:1")["id"]
    waits = submit(server, lab, "A100:1")["id"]  # the one card is taken
    assert server.schedule() == 1
    assert job(server, fits)["state"] == "scheduled"
    stored = job(server, waits)
    assert stored["state"] == "pending"
    assert stored["reason"] == server.plane.queued[waits].reason != ""
    assert states(server, waits) == ["pending"]
