"""The schema on both databases, by one path (``storage/meta.py``): ``create_all`` makes every
table, and a database of an older release, lacking the columns added since, is brought up to the
current tables by ``add_missing_columns`` with their defaults filling the rows already there.
Each test runs on a SQLite file and on a real PostgreSQL (``store_url``, tests/conftest.py)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Column, Table, insert, inspect, select, text
from sqlalchemy.dialects.postgresql.base import PGDialect

from xpupool.server.storage import meta
from xpupool.server.storage.audit import audit
from xpupool.server.storage.defrag_moves import defrag_moves
from xpupool.server.storage.jobs import job_events, jobs
from xpupool.server.storage.tenants import queues, tenants


def _addable(table: Table) -> list[Column[Any]]:
    """The columns ``add_missing_columns`` can add to an existing ``table`` (nullable or with a
    server default), leaving keys and indexed columns, which a later release never adds."""
    indexed = {c.name for index in table.indexes for c in index.columns}
    return [
        c
        for c in table.columns
        if not c.primary_key
        and not c.foreign_keys
        and c.name not in indexed
        and (c.nullable or c.server_default is not None)
    ]


def test_every_table_is_made_and_every_later_column_is_added_to_an_older_database(
    store_url: str,
) -> None:
    db = meta.connect(store_url)
    dropped: list[str] = []
    try:
        with db.begin() as conn:
            conn.execute(insert(tenants).values(name="old", created_at=1.0))
            conn.execute(insert(queues).values(name="old", tenant="old", quotas=[], created_at=1.0))
            move = {"at": 1.0, "job_id": 2, "for_job": 3, "tenant": "old", "lost_card_s": 0.0}
            conn.execute(insert(defrag_moves).values(**move))
            for table in meta.metadata.sorted_tables:
                for column in _addable(table):
                    conn.execute(text(f'ALTER TABLE "{table.name}" DROP COLUMN "{column.name}"'))
                    dropped.append(f"{table.name}.{column.name}")
        assert "tenants.max_pending_jobs" in dropped and "queues.max_priority" in dropped
    finally:
        db.dispose()
    db = meta.connect(store_url)  # what the next start does
    try:
        seen = inspect(db)
        for table in meta.metadata.sorted_tables:
            have = {c["name"] for c in seen.get_columns(table.name)}
            assert have == {c.name for c in table.columns}, table.name
        with db.connect() as conn:
            tenant = conn.execute(select(tenants).where(tenants.c.name == "old")).mappings().one()
            queue = conn.execute(select(queues).where(queues.c.name == "old")).mappings().one()
            kind = conn.execute(select(defrag_moves.c.kind)).scalar_one()
        for column in _addable(tenants):
            if column.server_default is not None:
                assert tenant[column.name] is not None, column.name
        assert queue["max_priority"] == 0
        assert kind == "defrag"  # a move stored before consolidation's were
    finally:
        db.dispose()


def test_a_pause_between_the_schemas_queries_does_not_end_the_plane_s_start(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The schema is a hundred queries and more; a loaded host once paused a plane's start
    between two of them for longer than the sessions' idle-in-transaction timeout (set for the
    owner row's locks), and PostgreSQL ended the session and the start. Here that timeout is
    0.3 s and one index check pauses 1 s: the start goes on."""
    monkeypatch.setitem(
        meta.PG_CONNECT_ARGS, "options", "-c idle_in_transaction_session_timeout=300"
    )
    checks: list[str] = []
    has_index = PGDialect.has_index

    def slow_has_index(self: PGDialect, conn: Any, table: str, index: str, **kw: Any) -> bool:
        checks.append(index)
        if len(checks) == 2:  # inside the transaction, after a first query
            time.sleep(1.0)
        return bool(has_index(self, conn, table, index, **kw))

    monkeypatch.setattr(PGDialect, "has_index", slow_has_index)
    db = meta.connect(pg_url)
    try:
        assert len(checks) >= 2
        with db.connect() as conn:  # a new session keeps the short timeout
            timeout = conn.execute(text("SHOW idle_in_transaction_session_timeout")).scalar_one()
        assert timeout == "300ms"
    finally:
        db.dispose()


def test_rows_come_back_as_written_and_ids_the_database_numbers_go_up(
    store_url: str,
) -> None:
    """Rows read back as written (JSON, integers, floats, text); ids the database numbers (job
    events) go up; the server defaults of a column fill a row that does not set it."""
    db = meta.connect(store_url)
    try:
        request = {"name": "j", "devices": {"count": 8, "models": ["H100"]}, "n": 2**40}
        with db.begin() as conn:
            conn.execute(insert(tenants).values(name="t", created_at=1.0))
            conn.execute(insert(queues).values(name="q", tenant="t", quotas=[], created_at=1.0))
            conn.execute(
                insert(jobs).values(
                    id=7,
                    name="j",
                    tenant="t",
                    queue="q",
                    state="pending",
                    reason="waiting \u00e9",
                    priority=2**31 - 1,
                    request=request,
                    command=["sh", "-c", "echo 'x'"],
                    env={},
                    on_node_lost="requeue",
                    attempts=0,
                    created_at=1.5,
                    updated_at=1.5,
                )
            )
            first = [
                conn.execute(
                    insert(job_events).values(job_id=7, at=1.0, state="pending", reason="d")
                ).inserted_primary_key[0]
                for _ in range(3)
            ]
            conn.execute(
                insert(audit).values(
                    at=1.0, role="admin", action="a", target="t", status=200, result="ok"
                )
            )
        with db.connect() as conn:
            row = conn.execute(select(jobs).where(jobs.c.id == 7)).mappings().one()
            kinds = conn.execute(select(audit.c.kind, audit.c.count)).one()
        assert first == sorted(first) and len(set(first)) == 3
        assert row["request"] == request and row["command"] == ["sh", "-c", "echo 'x'"]
        assert row["priority"] == 2**31 - 1 and row["reason"] == "waiting \u00e9"
        assert row["created_at"] == 1.5
        assert tuple(kinds) == ("admin", 1)
    finally:
        db.dispose()


def test_a_plane_on_sqlite_never_loads_the_postgresql_driver(tmp_path: Path) -> None:
    """psycopg is imported only for a PostgreSQL URL: ``xpupool up`` on SQLite starts as fast
    as before the driver was a dependency."""
    code = (
        "import sys; from xpupool.server.storage import meta; "
        f"meta.connect('sqlite:///{tmp_path / 'state.db'}'); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('psycopg', 'psycopg2')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == "[]"


def test_a_bare_postgresql_url_means_psycopg_3() -> None:
    assert meta.driver_url("postgresql://u@h/db") == "postgresql+psycopg://u@h/db"
    assert meta.driver_url("postgres://u@h:5/db") == "postgresql+psycopg://u@h:5/db"
    assert meta.driver_url("postgresql+psycopg://u@h/db") == "postgresql+psycopg://u@h/db"
    assert meta.driver_url("sqlite:///x.db") == "sqlite:///x.db"
