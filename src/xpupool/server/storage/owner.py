"""The store's owner: which ``xpupool up`` may write this database, until when, and its epoch.

One row (``id`` 1). ``epoch`` goes up by one at every take-over and is the fence: every write
transaction checks, before it commits, that the row still carries its server's epoch
(``server/ownership.py``). ``lease_until`` is the owner's wall-clock time (Unix seconds) at which
others may take the store if it has not renewed by then; 0 after a clean stop (released). The
host, pid and data dir only name the owner in a refusal.
"""

from __future__ import annotations

from sqlalchemy import Column, Float, Integer, String, Table

from xpupool.server.storage.meta import metadata

store_owner = Table(
    "store_owner",
    metadata,
    Column("id", Integer, primary_key=True),  # always 1: one row
    Column("epoch", Integer, nullable=False),  # +1 per take-over; the fence
    Column("host", String(255), nullable=False),
    Column("pid", Integer, nullable=False),
    Column("data_dir", String(4096), nullable=False),
    Column("taken_at", Float, nullable=False),  # Unix time, the owner's clock
    Column("renewed_at", Float, nullable=False),  # Unix time, the owner's clock
    Column("lease_until", Float, nullable=False),  # Unix time, the owner's clock; 0 = released
)
