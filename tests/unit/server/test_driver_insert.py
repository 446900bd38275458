"""Rows a submission stores through the driver's cursor (``storage/driver_insert.py``) are the
rows SQLAlchemy stores, byte for byte, on a real SQLite file; a driver error is SQLAlchemy's."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, insert, text
from sqlalchemy.exc import IntegrityError, OperationalError

from xpupool.server.storage import meta
from xpupool.server.storage.driver_insert import insert_rows
from xpupool.server.storage.jobs import job_events, jobs
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
def db(tmp_path: Path) -> Any:
    engine = meta.connect(f"sqlite:///{tmp_path / 'state.db'}")
    with engine.begin() as conn:
        conn.execute(text("PRAGMA foreign_keys=ON"))
        conn.execute(insert(tenants).values(name="lab", weight=1.0, created_at=1.0))
        conn.execute(
            insert(queues).values(name="lab", tenant="lab", cohort=None, quotas=[], created_at=1)
        )
    yield engine, tmp_path / "state.db"
    engine.dispose()


def raw_rows(path: Path, table: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(path) as raw:
        return raw.execute(f"SELECT * FROM {table} ORDER BY id").fetchall()


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
    locked = create_engine(f"sqlite:///{path}", connect_args={"timeout": 0.05})
    holder = sqlite3.connect(path)
    holder.execute("BEGIN EXCLUSIVE")  # another writer holds the store
    try:
        with pytest.raises(OperationalError, match="locked"), locked.begin() as conn:
            insert_rows(conn, jobs, [job_row(2)])
    finally:
        holder.rollback()
        holder.close()
        locked.dispose()
    assert [r[0] for r in raw_rows(path, "jobs")] == [1]
