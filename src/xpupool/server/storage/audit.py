"""The audit log: who did what to the pool, when, and with what result (docs/security.md).

One row per admin action, agent registration, bootstrap exchange and refused agent request;
successful heartbeats and log uploads are counted, not written. The table is bounded: the
oldest rows beyond ``keep`` are deleted as new ones arrive (``server/audit.py``).
"""

from __future__ import annotations

from sqlalchemy import Column, Float, Integer, String, Table

from xpupool.server.storage.meta import metadata

audit = Table(
    "audit",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("at", Float, nullable=False, index=True),
    Column("token_id", Integer, nullable=True),  # 0 = the in-process agent; NULL = none
    Column("role", String(10), nullable=False),
    Column("tenant", String(63), nullable=True),
    Column("node", String(200), nullable=True),  # the node(s) an agent credential speaks for
    Column("action", String(63), nullable=False),
    Column("target", String(300), nullable=False),
    Column("status", Integer, nullable=False),
    Column("result", String(500), nullable=False),  # 'ok' or the reason it was refused
)
