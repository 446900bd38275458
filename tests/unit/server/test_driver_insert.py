"""Rows a submission and a scheduling batch write through the driver's cursor
(``storage/driver_insert.py``) are the rows SQLAlchemy writes, byte for byte, on a real SQLite
file, and on a real PostgreSQL (``store_url``), where they go through SQLAlchemy itself; a driver
error is SQLAlchemy's."""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, insert, text
from sqlalchemy.exc import IntegrityError, OperationalError, StatementError

from xpupool.server.storage import meta
from xpupool.server.storage.driver_insert import insert_rows, update_rows
from xpupool.server.storage.job_writes import job_update, job_update_params
from xpupool.server.storage.jobs import allocations, job_events, jobs
from xpupool.server.storage.tenants import queues, tenants


def job_row(job_id: int, **over: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "id": job_id,
        "name": "naïve-job \u2603",
        "tenant": "lab",
        "queue": "lab",
        "state": "pending",
        "reason": "waiting for the scheduler",
        "priority": 3,
        "request": {"name": "x", "devices": {"count": 1, "models": ["A100"], "memory": "4Gi"}},
        "command": ["python", "-c", "print('é')"],
        "image": None,
        "env": {"A": "1", "UNICODE": "ü"},
        "on_node_lost": "requeue",
        "flavor": None,
        "exit_code": None,
        "attempts": 0,
        "retries": 0,
        "max_retries": None,
        "retry_on": None,
        "backoff_s": 1.5,
        "backoff_max_s": 60.0,
        "max_runtime_s": None,
        "created_at": 1000.25,
        "updated_at": 1000.25,
    }
    row.update(over)
    return row


@pytest.fixture
def db(store_url: str) -> Any:
    engine = meta.connect(store_url)
    with engine.begin() as conn:
        conn.execute(insert(tenants).values(name="lab", weight=1.0, created_at=1.0))
        conn.execute(
            insert(queues).values(name="lab", tenant="lab", cohort=None, quotas=[], created_at=1)
        )
    yield engine, engine
    engine.dispose()


def raw_rows(engine: Engine, table: str) -> list[tuple[Any, ...]]:
    """The rows as the driver returns them, no SQLAlchemy type between."""
    with engine.connect() as conn:
        return [tuple(r) for r in conn.exec_driver_sql(f"SELECT * FROM {table} ORDER BY id")]


@pytest.mark.parametrize(
    "over", [{}, {"retry_on": ["exit_code", "node_lost"], "image": "img:1", "exit_code": 0}]
)
def test_the_rows_are_those_sqlalchemy_stores(db: Any, over: dict[str, Any]) -> None:
    engine, path = db
    with engine.begin() as conn:
        conn.execute(insert(jobs), job_row(1, **over))
        insert_rows(conn, jobs, [job_row(2, **over)])
        events = [
            {"job_id": j, "at": 1.5, "state": "pending", "reason": r}
            for j in (1, 2)
            for r in ("a", "b")
        ]
        conn.execute(insert(job_events), events[:2])
        insert_rows(conn, job_events, events[2:])
    first, second = raw_rows(path, "jobs")
    assert first[1:] == second[1:]
    stored = raw_rows(path, "job_events")
    assert [e[2:] for e in stored[:2]] == [e[2:] for e in stored[2:]]


def test_nothing_is_stored_when_the_transaction_rolls_back(db: Any) -> None:
    engine, path = db

    def fails_after_the_insert() -> None:
        with engine.begin() as conn:
            insert_rows(conn, jobs, [job_row(1)])
            raise RuntimeError("a later step fails")

    with pytest.raises(RuntimeError):
        fails_after_the_insert()
    assert raw_rows(path, "jobs") == []


def test_a_driver_error_is_raised_as_sqlalchemy_raises_it(db: Any) -> None:
    engine, path = db
    with pytest.raises(IntegrityError), engine.begin() as conn:  # no such tenant
        insert_rows(conn, jobs, [job_row(1, tenant="nobody")])
    with engine.begin() as conn:
        insert_rows(conn, jobs, [job_row(1)])
    if engine.dialect.name == "sqlite":
        file = engine.url.database
        locked = create_engine(f"sqlite:///{file}", connect_args={"timeout": 0.05})
        holder: Any = sqlite3.connect(file)
        holder.execute("BEGIN EXCLUSIVE")  # another writer holds the store
        why = "locked"
    else:
        locked = create_engine(engine.url, connect_args={"options": "-c lock_timeout=50"})
        holder = engine.connect()
        holder.begin()
        holder.execute(text("LOCK TABLE jobs IN EXCLUSIVE MODE"))
        why = "lock timeout"
    try:
        with pytest.raises(OperationalError, match=why), locked.begin() as conn:
            insert_rows(conn, jobs, [job_row(2)])
    finally:
        holder.rollback()
        holder.close()
        locked.dispose()
    assert [r[0] for r in raw_rows(path, "jobs")] == [1]


UPDATES = [
    {"state": "scheduled", "reason": "on n1 \u2603", "flavor": "A100", "updated_at": 2.5},
    {"state": "failed", "exit_code": 3, "retries": 1, "not_before": None, "started_at": 9.75},
    {"retry_on": ["exit_code"], "env": {"K": "ü"}, "command": ["run", "é"], "backoff_s": 0.1},
]


@pytest.mark.parametrize("cols", UPDATES)
def test_updates_are_those_sqlalchemy_makes(db: Any, cols: dict[str, Any]) -> None:
    engine, path = db
    key = tuple(sorted(cols))
    with engine.begin() as conn:
        insert_rows(conn, jobs, [job_row(i) for i in (1, 2, 3, 4)])
        conn.execute(job_update(key), [job_update_params(1, cols)])
        update_rows(conn, job_update(key), [job_update_params(2, cols)])  # one row: execute
        update_rows(conn, job_update(key), [job_update_params(3, cols)] * 2)  # executemany
    first, second, third, untouched = raw_rows(path, "jobs")
    assert first[1:] == second[1:] == third[1:]
    assert first[1:] != untouched[1:]  # it did change something


def test_rows_of_other_keys_go_in_a_statement_of_their_own(db: Any) -> None:
    """A batch's allocation rows or events may not all name the same columns: each set of keys is
    its own statement, and every row is stored whole (not cut to the first row's columns)."""
    engine, path = db
    with engine.begin() as conn:
        insert_rows(conn, jobs, [job_row(1)])
        insert_rows(
            conn,
            allocations,
            [
                {"id": 7, "job_id": 1, "replica": 0, "node": "n1", "queue": "lab",
                 "flavor": "f", "data": {"a": 1}},
                {"id": 8, "replica": 1, "node": "n2", "queue": "lab", "flavor": "f",
                 "data": {"b": [1, 2]}, "job_id": 1},
            ],
        )  # fmt: skip
        insert_rows(conn, jobs, [job_row(2), {k: v for k, v in job_row(3).items() if k != "image"}])
    stored = raw_rows(path, "allocations")
    assert [(r[0], r[2], r[3]) for r in stored] == [(7, 0, "n1"), (8, 1, "n2")]
    assert [r[0] for r in raw_rows(path, "jobs")] == [1, 2, 3]


def test_an_update_with_other_bound_values_than_its_statement_is_refused(db: Any) -> None:
    engine, path = db
    with engine.begin() as conn:
        insert_rows(conn, jobs, [job_row(1)])
    # refused before it runs: by driver_insert (SQLite), by SQLAlchemy's own check (PostgreSQL)
    with pytest.raises((ValueError, StatementError), match="b_state"), engine.begin() as conn:
        update_rows(conn, job_update(("reason", "state")), [{"b_id": 1, "b_reason": "x"}])
    assert raw_rows(path, "jobs")[0][5] == "waiting for the scheduler"


def test_a_failed_update_is_raised_as_sqlalchemy_raises_it(db: Any) -> None:
    engine, path = db
    with engine.begin() as conn:
        insert_rows(conn, jobs, [job_row(1)])

    def second_fails() -> None:
        with engine.begin() as conn:
            update_rows(conn, job_update(("reason",)), [{"b_id": 1, "b_reason": "kept?"}])
            update_rows(conn, job_update(("state",)), [{"b_id": 1, "b_state": None}])  # NOT NULL

    with pytest.raises(IntegrityError):
        second_fails()
    assert raw_rows(path, "jobs")[0][5] == "waiting for the scheduler"  # rolled back, both
