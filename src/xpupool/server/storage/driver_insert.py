"""Rows written through the database driver's cursor, on the submission and scheduling paths.

A submission stores two rows (the job and its first event); a scheduling batch updates its jobs'
rows and inserts their events and allocations. Through SQLAlchemy Core each statement costs
several times what SQLite takes to run it: building the execution context, the parameters and the
result, for a statement already compiled. At 1,000 submissions/s that was a quarter of what the
server spent on a submission, and the batch's three statements most of what a pass of a few jobs
cost beyond placing them (issue 25). :func:`insert_rows` and :func:`update_rows` compile the
statement once per statement, columns and dialect, convert the values with the bound parameters'
own processors (the JSON columns are written exactly as SQLAlchemy writes them) and run it on
the connection's driver cursor, inside the connection's transaction. A dialect whose parameters
are not positional (``?``), PostgreSQL's psycopg among them, goes through SQLAlchemy, one
statement per set of columns as here: there SQLAlchemy's own many-rows ``INSERT`` (``insertmany
values``) is the fast path, and the database's round trip, not SQLAlchemy's CPU, is the cost
(docs/benchmarks.md, the store on PostgreSQL). A driver error is raised as
SQLAlchemy raises it (``OperationalError`` for a full disk), so ``ControlPlane.write`` reports
and undoes it as any other failed write. ``XPUPOOL_WITHOUT=driver-sql`` sends every dialect through
SQLAlchemy, for this path's benchmark (``server/machinery_switch.py``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from sqlalchemy import Connection, Dialect, Insert, Table, Update, insert
from sqlalchemy.exc import DBAPIError

from xpupool.server import machinery_switch

_PLAIN = machinery_switch.off("driver-sql")  # every statement through SQLAlchemy (its benchmark)


@dataclass(frozen=True, slots=True)
class _Compiled:
    sql: str
    keys: tuple[str, ...]  # the parameters' order
    processors: tuple[Callable[[Any], Any] | None, ...]


def insert_rows(conn: Connection, table: Table, rows: Sequence[dict[str, Any]]) -> None:
    """``INSERT`` ``rows`` into ``table`` in ``conn``'s transaction; rows with other keys than the
    first go in a statement of their own."""
    if not rows:
        return
    if conn.dialect.paramstyle != "qmark" or _PLAIN:
        for part in _by_keys(rows).values():  # one statement names one set of columns
            conn.execute(_insert(table), part)
        return
    for columns, part in _by_keys(rows).items():
        _run(conn, _compile(_insert(table), columns, conn.dialect), part)


def update_rows(conn: Connection, statement: Update, rows: Sequence[dict[str, Any]]) -> None:
    """Run ``statement`` (an ``UPDATE`` whose values are all bound parameters) once per row of
    ``rows``, each keyed by the parameters' names, in ``conn``'s transaction."""
    if not rows:
        return
    if conn.dialect.paramstyle != "qmark" or _PLAIN:
        for part in _by_keys(rows).values():
            conn.execute(statement, part)
        return
    for columns, part in _by_keys(rows).items():
        _run(conn, _compile(statement, columns, conn.dialect), part)


STATEMENT_WATCH = "xpupool.statement_watch"
"""The key of a connection's ``info`` under which its owner keeps a :class:`StatementWatch`."""


class StatementWatch(Protocol):
    """Told when a statement is sent and when it is answered (``server/plane/store_stall.py``)."""

    def enter(self) -> None: ...

    def leave(self) -> None: ...


def _by_keys(rows: Sequence[dict[str, Any]]) -> dict[tuple[str, ...], list[dict[str, Any]]]:
    """``rows`` grouped by their keys, in order (one group in practice)."""
    groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(tuple(sorted(row)), []).append(row)
    return groups


def _run(conn: Connection, compiled: _Compiled, rows: Sequence[dict[str, Any]]) -> None:
    dialect = conn.dialect
    params = [
        tuple(
            row[k] if p is None else p(row[k])
            for k, p in zip(compiled.keys, compiled.processors, strict=True)
        )
        for row in rows
    ]
    driver = conn.connection.driver_connection
    assert driver is not None  # an open connection's
    cursor = driver.cursor()
    many = len(params) != 1
    # the plane's measure of a store that does not answer (server/plane/store_stall.py) sees
    # SQLAlchemy's statements through its cursor events, and these, which bypass them, here
    watch: StatementWatch | None = conn.info.get(STATEMENT_WATCH)
    if watch is not None:
        watch.enter()
    try:
        if not many:
            cursor.execute(compiled.sql, params[0])
        else:
            cursor.executemany(compiled.sql, params)
    except dialect.loaded_dbapi.Error as exc:
        raise DBAPIError.instance(
            compiled.sql, params, exc, dialect.loaded_dbapi.Error, dialect=dialect
        ) from exc
    finally:
        if watch is not None:
            watch.leave()
        cursor.close()


@functools.lru_cache(maxsize=32)
def _insert(table: Table) -> Insert:
    """One ``INSERT`` per table: what :func:`_compile` keeps is found by the statement."""
    return insert(table)


@functools.lru_cache(maxsize=64)
def _compile(statement: Insert | Update, columns: tuple[str, ...], dialect: Dialect) -> _Compiled:
    """``statement`` compiled for rows with ``columns``: for an ``INSERT`` the columns it sets;
    for an ``UPDATE``, the names of its bound parameters, all of which a row must have."""
    if isinstance(statement, Insert):
        compiled = statement.compile(dialect=dialect, column_keys=list(columns))
    else:
        compiled = statement.compile(dialect=dialect)
    keys = tuple(compiled.positiontup or ())
    if not isinstance(statement, Insert) and set(keys) != set(columns):
        raise ValueError(f"rows bind {sorted(columns)}, the statement {sorted(keys)}")
    processors = tuple(compiled.binds[k].type.bind_processor(dialect) for k in keys)
    return _Compiled(str(compiled), keys, processors)
