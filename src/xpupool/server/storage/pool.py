"""The pool's own row: which pool this database is, and the first job and allocation ids it may
hand out.

A database knows its pool id so that a data dir and a database from different pools are never
opened together, and an emptied database is told apart from an old one (``server/datadir.py``).
``first_job_id`` is above every job id the data dir ever saw, so a re-initialised pool never hands
out a job id (and with it an old log) again. ``first_allocation_id`` is above every allocation id
ever stored: allocation rows go when their job stops holding devices, so the rows alone cannot
say which ids were used, and an agent never runs an allocation id it has finished again (issue
43, item 3). It is raised in the transaction that stores the allocation (:func:`raise_allocation_mark`),
so a crash can never leave an id stored but not marked.
"""

from __future__ import annotations

from sqlalchemy import Column, Connection, Float, Integer, String, Table, func, select, update

from xpupool.server.storage.jobs import allocations
from xpupool.server.storage.meta import metadata

pool = Table(
    "pool",
    metadata,
    Column("id", Integer, primary_key=True),  # always 1: one row
    Column("pool_id", String(64), nullable=False),
    Column("first_job_id", Integer, nullable=False, default=1),
    Column("first_allocation_id", Integer, nullable=False, default=1, server_default="1"),
    Column("created_at", Float, nullable=False),
    Column("opened_at", Float, nullable=False),  # written on every start: proves the store writable
)


def raise_allocation_mark(conn: Connection, above: int) -> None:
    """In ``conn``'s transaction: ``first_allocation_id`` becomes ``above + 1`` unless it is
    higher already (it never goes down). A store without the pool's row (one ``xpupool up`` has
    not opened: ``datadir.open_pool`` writes it) keeps no mark."""
    conn.execute(
        update(pool)
        .where(pool.c.first_allocation_id <= above)
        .values(first_allocation_id=above + 1)
    )


def first_allocation_id(conn: Connection) -> int:
    """The first allocation id the pool may hand out: above the stored mark and above every
    stored allocation row (a database from before the mark has only its rows to go by)."""
    mark = conn.execute(select(pool.c.first_allocation_id)).scalar()
    top = conn.execute(select(func.max(allocations.c.id))).scalar()
    return max(int(mark or 1), int(top or 0) + 1)
