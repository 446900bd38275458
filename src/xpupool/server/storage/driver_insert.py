"""Rows inserted through the database driver's cursor, on the submission path.

A submission stores two rows (the job and its first event). Through SQLAlchemy Core each
``INSERT`` costs several times what SQLite takes to run it: building the execution context,
the parameters and the result, for a statement already compiled. At 1,000 submissions/s that
was a quarter of what the server spent on a submission (issue 25). :func:`insert_rows` compiles
the statement once per table, columns and dialect, converts the values with the columns' own
bind processors (the JSON columns are written exactly as SQLAlchemy writes them) and runs it on
the connection's driver cursor, inside the connection's transaction. A dialect whose parameters
are not positional (``?``) goes through SQLAlchemy as before. A driver error is raised as
SQLAlchemy raises it (``OperationalError`` for a full disk), so ``ControlPlane.write`` reports
and undoes it as any other failed write.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Dialect, Table, insert
from sqlalchemy.exc import DBAPIError


@dataclass(frozen=True, slots=True)
class _Compiled:
    sql: str
    keys: tuple[str, ...]  # the parameters' order
    processors: tuple[Callable[[Any], Any] | None, ...]


def insert_rows(conn: Connection, table: Table, rows: Sequence[dict[str, Any]]) -> None:
    """``INSERT`` ``rows`` into ``table`` in ``conn``'s transaction; every row has the keys of
    the first, in any order."""
    if not rows:
        return
    dialect = conn.dialect
    if dialect.paramstyle != "qmark":
        conn.execute(insert(table), list(rows))
        return
    compiled = _compile(table, tuple(sorted(rows[0])), dialect)
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
    try:
        if len(params) == 1:
            cursor.execute(compiled.sql, params[0])
        else:
            cursor.executemany(compiled.sql, params)
    except dialect.loaded_dbapi.Error as exc:
        raise DBAPIError.instance(
            compiled.sql, params, exc, dialect.loaded_dbapi.Error, dialect=dialect
        ) from exc
    finally:
        cursor.close()


@functools.lru_cache(maxsize=32)
def _compile(table: Table, columns: tuple[str, ...], dialect: Dialect) -> _Compiled:
    compiled = insert(table).compile(dialect=dialect, column_keys=list(columns))
    keys = tuple(compiled.positiontup or ())
    processors = tuple(table.c[k].type.bind_processor(dialect) for k in keys)
    return _Compiled(str(compiled), keys, processors)
