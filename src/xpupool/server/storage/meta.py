"""The one MetaData every table registers on, and the database connection with SQLite tuned for
one writer: WAL (readers never block the writer), a busy timeout, foreign keys on."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, MetaData, create_engine, event

metadata = MetaData()


def connect(url: str) -> Engine:
    """An engine for ``url`` (``sqlite:///path`` or any SQLAlchemy URL, e.g. PostgreSQL).

    SQLite gets WAL with ``synchronous=NORMAL``: a committed transaction survives the process being
    killed (the WAL is in the OS page cache); only a power loss may drop the last commits.
    """
    is_sqlite = url.startswith("sqlite")
    kwargs: dict[str, Any] = {}
    if is_sqlite:
        kwargs["connect_args"] = {"check_same_thread": False, "timeout": 30}
    engine = create_engine(url, **kwargs)
    if is_sqlite:

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.close()

    from xpupool.server.storage import fleet, jobs, tenants  # noqa: F401  (register the tables)

    metadata.create_all(engine)
    return engine
