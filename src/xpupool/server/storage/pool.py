"""The pool's own row: which pool this database is, and the first job id it may hand out.

A database knows its pool id so that a data dir and a database from different pools are never
opened together, and an emptied database is told apart from an old one (``server/datadir.py``).
``first_job_id`` is above every job id the data dir ever saw, so a re-initialised pool never hands
out a job id (and with it an old log) again.
"""

from __future__ import annotations

from sqlalchemy import Column, Float, Integer, String, Table

from xpupool.server.storage.meta import metadata

pool = Table(
    "pool",
    metadata,
    Column("id", Integer, primary_key=True),  # always 1: one row
    Column("pool_id", String(64), nullable=False),
    Column("first_job_id", Integer, nullable=False, default=1),
    Column("created_at", Float, nullable=False),
    Column("opened_at", Float, nullable=False),  # written on every start: proves the store writable
)
