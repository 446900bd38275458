"""The audit log: who did what to the pool, when, and with what result (docs/security.md).

One row per admin action, agent registration, bootstrap exchange and binding; refused agent
requests are aggregated, one row per credential, source, action and status per window with their
``count`` (``server/audit.py``). Each row has a ``kind`` (``schemas/audit.py`` ``AuditKind``) and each kind
its own bound: the oldest rows of a kind beyond its ``keep`` are deleted as new rows of that kind
arrive, so a flood of refusals never evicts the admin's history (issue 43, item 8).
"""

from __future__ import annotations

from sqlalchemy import (
    Column,
    Connection,
    Float,
    Index,
    Integer,
    String,
    Table,
    select,
    text,
    update,
)

from xpupool.server.auth import AGENT_ROLES
from xpupool.server.schemas.audit import AuditKind
from xpupool.server.storage.meta import metadata

REFUSALS = frozenset({"report_ignored"})
"""Actions of an agent credential that the server refused although it answered 200 (a report of a
replica its node does not hold): kept with the refused requests, which a hostile node controls."""

audit = Table(
    "audit",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("at", Float, nullable=False, index=True),  # the last occurrence
    Column("token_id", Integer, nullable=True),  # 0 = the in-process agent; NULL = none
    Column("role", String(10), nullable=False),
    Column("tenant", String(63), nullable=True),
    Column("node", String(200), nullable=True),  # the node(s) an agent credential speaks for
    Column("action", String(63), nullable=False),
    Column("target", String(300), nullable=False),  # the last occurrence's
    Column("status", Integer, nullable=False),
    Column("result", String(500), nullable=False),  # 'ok' or the (last) reason it was refused
    # AuditKind; quoted: add_missing_columns writes the default as it is given
    Column("kind", String(8), nullable=False, server_default=text("'admin'")),
    Column("count", Integer, nullable=False, server_default="1"),  # occurrences in this row
    Column("first_at", Float, nullable=True),  # the first occurrence; NULL: the same as ``at``
    Column("source", String(64), nullable=True),  # the client's address; NULL: not over TCP
    Index("audit_kind_id", "kind", "id"),
)


def kind_of(role: str, action: str, status: int) -> AuditKind:
    """The kind of a row: an agent credential's refused request (or ignored report) is
    ``refused``, its other rows ``agent``; everything else (the admin, and the server acting on
    the admin's behalf, role 'none') is ``admin``. Tenants' requests make no rows."""
    if role not in AGENT_ROLES:
        return AuditKind.ADMIN
    if status >= 400 or action in REFUSALS:
        return AuditKind.REFUSED
    return AuditKind.AGENT


def classify_stored_rows(conn: Connection) -> None:
    """Give the rows of a release before kinds their kind (the new column's default said
    ``admin`` for every row), by :func:`kind_of`, one update per distinct (role, action,
    status)."""
    t = audit
    shapes = conn.execute(select(t.c.role, t.c.action, t.c.status).distinct()).all()
    for role, action, status in shapes:
        kind = kind_of(role, action, status)
        if kind is not AuditKind.ADMIN:
            same = (t.c.role == role, t.c.action == action, t.c.status == status)
            conn.execute(update(t).where(*same).values(kind=kind.value))
