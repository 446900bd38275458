"""Submissions taken together (``jobs.submit_many``; ``jobs.submit`` is a batch of one): one store
transaction for several, each answered as it would be alone, and a write that fails changes
nothing, in the store or in memory."""

from __future__ import annotations

from typing import Any

import pytest
from server_kit import BOTH_STORES, Server, node, tenant
from sqlalchemy import func, select
from sqlalchemy.exc import OperationalError

from xpupool.model.errors import OverLimit, RequestError, Unavailable
from xpupool.model.request_model import request_to_dict
from xpupool.server.auth import Principal
from xpupool.server.job_views import Submitted
from xpupool.server.plane import submissions
from xpupool.server.schemas.jobs import JobIn, JobPhase
from xpupool.server.services import jobs
from xpupool.server.services.tenants import authenticate
from xpupool.server.storage.driver_insert import insert_rows
from xpupool.server.storage.jobs import job_events as t_events
from xpupool.server.storage.jobs import jobs as t_jobs

STORES = BOTH_STORES  # its tests' server on SQLite and on PostgreSQL (conftest.py)

OK = {"spec": "A100 mem=4Gi", "command": ["true"]}


def who(server: Server, token: str) -> Principal:
    found = authenticate(server.plane, token)
    assert found is not None
    return found


def body(**over: Any) -> JobIn:
    return JobIn.model_validate({**OK, **over})


def stored(server: Server) -> tuple[list[tuple[int, str]], int]:
    """(id, name) of the stored jobs, and how many events are stored."""
    with server.plane.db.connect() as conn:
        rows = conn.execute(select(t_jobs.c.id, t_jobs.c.name).order_by(t_jobs.c.id)).all()
        events = conn.execute(select(func.count()).select_from(t_events)).scalar_one()
    return [(r.id, r.name) for r in rows], events


@pytest.fixture
def pool(server: Server) -> tuple[Server, Principal, Principal]:
    node(server, "n1")
    return server, who(server, tenant(server, "lab")), who(server, tenant(server, "ops"))


@pytest.mark.slow
def test_each_is_answered_as_alone_and_the_refused_store_nothing(
    pool: tuple[Server, Principal, Principal],
) -> None:
    server, lab, ops = pool
    admin = who(server, server.admin_token)
    results = jobs.submit_many(
        server.plane,
        [
            (lab, body(name="a")),
            (lab, body(name="b", queue="nope")),
            (ops, body(name="c")),
            (admin, body(name="d")),  # the admin names no tenant
            (admin, body(name="e", tenant="ops")),
        ],
    )
    kinds = [type(r).__name__ for r in results]
    assert kinds == ["Submitted", "RequestError", "Submitted", "RequestError", "Submitted"]
    assert isinstance(results[1], RequestError) and results[1].field == "queue"
    assert isinstance(results[3], RequestError) and results[3].field == "tenant"
    made = [r for r in results if isinstance(r, Submitted)]
    assert [(m.row["id"], m.row["name"], m.row["tenant"]) for m in made] == [
        (1, "a", "lab"),
        (2, "c", "ops"),
        (3, "e", "ops"),
    ]
    assert stored(server) == ([(1, "a"), (2, "c"), (3, "e")], 3)
    assert sorted(server.plane.queued) == [1, 2, 3]
    # the answer reads as the route's: the job pending, with its first event
    view = made[0].view()
    assert view.state == JobPhase.PENDING and [e.state for e in view.events] == [view.state]


@pytest.mark.slow
def test_each_sees_those_before_it(
    server: Server, pool: tuple[Server, Principal, Principal]
) -> None:
    _, lab, _ = pool
    r = server.client.patch("/v1/tenants/lab", json={"max_pending_jobs": 2}, headers=server.admin)
    assert r.status_code == 200, r.text
    results = jobs.submit_many(server.plane, [(lab, body(name=n)) for n in "abc"])
    assert [type(r).__name__ for r in results] == ["Submitted", "Submitted", "OverLimit"]
    assert isinstance(results[2], OverLimit)
    assert stored(server)[0] == [(1, "a"), (2, "b")]


@pytest.mark.slow
def test_a_write_that_fails_fails_the_batch_and_changes_nothing(
    server: Server, pool: tuple[Server, Principal, Principal], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, lab, ops = pool
    jobs.submit(server.plane, lab, body(name="before"))
    real, calls = insert_rows, []

    def fails_on_the_third_job(conn: Any, table: Any, rows: Any) -> None:
        calls.append(table.name)
        if calls.count("jobs") == 3:
            raise OperationalError("INSERT", {}, Exception("database or disk is full"))
        real(conn, table, rows)

    monkeypatch.setattr(submissions, "insert_rows", fails_on_the_third_job)
    batch = [(lab, body(name="a")), (ops, body(queue="nope")), (ops, body(name="b"))]
    results = jobs.submit_many(server.plane, [*batch, (lab, body(name="c"))])
    assert [type(r).__name__ for r in results] == [
        "Unavailable",
        "RequestError",
        "Unavailable",
        "Unavailable",
    ]
    assert stored(server) == ([(1, "before")], 1)
    assert sorted(server.plane.queued) == [1] and server.plane.next_job_id == 2
    monkeypatch.undo()
    assert server.plane.check_store()
    done = jobs.submit_many(server.plane, [(lab, body(name="after"))])
    assert isinstance(done[0], Submitted) and done[0].row["id"] == 2


@pytest.mark.slow
def test_a_bug_halfway_puts_memory_back_to_the_store(
    server: Server, pool: tuple[Server, Principal, Principal], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, lab, _ = pool
    real, calls = request_to_dict, []

    def breaks_on_the_second(req: Any) -> Any:
        calls.append(req)
        if len(calls) == 2:
            raise RuntimeError("a bug")
        return real(req)

    monkeypatch.setattr(submissions, "request_to_dict", breaks_on_the_second)
    results = jobs.submit_many(server.plane, [(lab, body(name="a")), (lab, body(name="b"))])
    assert [type(r).__name__ for r in results] == ["RuntimeError", "RuntimeError"]
    assert stored(server) == ([], 0)
    assert not server.plane.queued and server.plane.next_job_id == 1
    assert server.plane.health.failure is None  # not the store's failure


@pytest.mark.slow
def test_the_store_being_unhealthy_refuses_the_batch_at_once(
    server: Server, pool: tuple[Server, Principal, Principal]
) -> None:
    _, lab, _ = pool
    server.plane.health.fail("disk full")
    results = jobs.submit_many(server.plane, [(lab, body(name="a")), (lab, body(queue="x"))])
    assert all(isinstance(r, Unavailable) for r in results)
    assert stored(server) == ([], 0)
