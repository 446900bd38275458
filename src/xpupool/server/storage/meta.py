"""The one MetaData every table registers on, and the database connection with SQLite tuned for
one writer: WAL (readers never block the writer), a busy timeout, foreign keys on."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Engine, MetaData, create_engine, event, inspect, text

metadata = MetaData()


PG_CONNECT_ARGS: dict[str, Any] = {
    "connect_timeout": 10,
    # a database host that vanished (partition, power) is found by the kernel in ~11 s, not
    # the ~15 min of TCP retransmissions, so a plane cut off fails its writes and renewals
    "keepalives": 1,
    "keepalives_idle": 5,
    "keepalives_interval": 2,
    "keepalives_count": 3,
    # keepalives are not sent while a statement's bytes wait to be acknowledged: a database
    # that drops packets (a blackhole) would hold such a write for the ~15 min of TCP
    # retransmissions; after this many ms unacknowledged the connection fails instead
    "tcp_user_timeout": 10_000,
    # a plane paused (SIGSTOP) or cut off inside a transaction keeps its row locks, the owner
    # row's among them, until PostgreSQL ends its session: after this long, so a standby's
    # claim waits that much at most (docs/postgresql.md)
    "options": "-c idle_in_transaction_session_timeout=5000",
}
"""psycopg's connection settings for the store (libpq's names)."""

SCHEMA_IDLE_MS = 60_000
"""The idle-in-transaction timeout of the one transaction that brings the schema up to date at a
plane's start (``connect``), in ms: long enough for any pause of a loaded host, short enough that
a plane stopped there frees the tables' locks within a minute."""


def driver_url(url: str) -> str:
    """``url`` with the driver the store uses: a bare ``postgresql://`` (or ``postgres://``, as
    many hosting services write it) means psycopg 3, the driver xpupool depends on, where
    SQLAlchemy would pick psycopg2. Any other URL is kept as given."""
    for bare in ("postgresql://", "postgres://"):
        if url.startswith(bare):
            return "postgresql+psycopg://" + url[len(bare) :]
    return url


def connect(url: str, *, schema: bool = True) -> Engine:
    """An engine for ``url`` (``sqlite:///path`` or any SQLAlchemy URL, e.g. PostgreSQL).

    ``schema``: create the missing tables, columns and indexes first. Reading the stored schema
    is a hundred queries or more on PostgreSQL (most of a second), so a process opens it once:
    ``False`` for the engines opened after the store's owner row was claimed, whose own engine
    made the schema (``server/ownership.py``).

    SQLite gets WAL with ``synchronous=NORMAL``: a committed transaction survives the process being
    killed (the WAL is in the OS page cache); only a power loss may drop the last commits.
    PostgreSQL runs at its default isolation (read committed): every write of the plane goes
    through one writer, fenced by the owner row (``server/ownership.py``), so nothing stronger is
    needed. Its driver is imported only here, for such a URL: a SQLite plane never loads it.
    """
    url = driver_url(url)
    is_sqlite = url.startswith("sqlite")
    kwargs: dict[str, Any] = {}
    if is_sqlite:
        kwargs["connect_args"] = {"check_same_thread": False, "timeout": 30}
    elif url.startswith("postgresql+psycopg"):
        kwargs["connect_args"] = PG_CONNECT_ARGS
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

    from xpupool.server.storage import (  # noqa: F401  (tables)
        audit,
        billing,
        card_layouts,
        defrag_moves,
        fleet,
        history,
        jobs,
        owner,
        pool,
        reservations,
        secrets,
        service_tokens,
        services,
        site_pods,
        tenants,
        throughput,
        usage,
        volumes,
        web_sessions,
    )

    if not schema:
        return engine
    from xpupool.server.usage.price_history import price_terms

    with engine.begin() as conn:  # one transaction: on PostgreSQL the schema changes whole or not
        if engine.dialect.name == "postgresql":
            # the schema is a hundred queries and more, and a loaded host can pause the process
            # between two of them for longer than the idle-in-transaction timeout set above for
            # the owner row's locks, which would end the session and the plane's start with it
            conn.execute(text(f"SET LOCAL idle_in_transaction_session_timeout = {SCHEMA_IDLE_MS}"))
        metadata.create_all(conn)
        added = add_missing_columns(conn)
        add_missing_indexes(conn)
        if "audit.kind" in added:
            audit.classify_stored_rows(conn)
        billing.move_single_table(conn, price_terms)  # an older single price table joins history
    return engine


def add_missing_columns(conn: Connection) -> list[str]:
    """Bring a database made by an older release up to the current tables: every column the
    metadata has and the stored table lacks is added (``ALTER TABLE ... ADD COLUMN``), with its
    ``server_default`` filling the existing rows. A new column on an existing table must therefore
    be nullable or carry a ``server_default``. Returns ``table.column`` for each column added."""
    added: list[str] = []
    existing = inspect(conn)
    for table in metadata.sorted_tables:
        if not existing.has_table(table.name):
            continue
        have = {c["name"] for c in existing.get_columns(table.name)}
        for column in table.columns:
            if column.name in have:
                continue
            if not column.nullable and column.server_default is None:
                raise RuntimeError(
                    f"column {table.name}.{column.name} is new, NOT NULL and has no "
                    "server_default: older databases cannot be upgraded"
                )
            ddl = column.type.compile(dialect=conn.dialect)
            default = ""
            if column.server_default is not None:
                arg = getattr(column.server_default, "arg", None)
                value = getattr(arg, "text", None) or str(arg)  # text("0") or "0"
                default = f" DEFAULT {value}"
            null = "" if column.nullable else " NOT NULL"
            conn.execute(
                text(f'ALTER TABLE "{table.name}" ADD COLUMN "{column.name}" {ddl}{null}{default}')
            )
            added.append(f"{table.name}.{column.name}")
    return added


def add_missing_indexes(conn: Connection) -> None:
    """Create every index the metadata has and the stored tables lack (``create_all`` makes
    the indexes of the tables it creates only), so that an index added to an existing table
    reaches the databases of older releases too."""
    for table in metadata.sorted_tables:
        for index in table.indexes:
            index.create(conn, checkfirst=True)
