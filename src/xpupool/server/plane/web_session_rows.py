"""The store's side of dashboard sessions (``storage/web_sessions.py``): add one, find one, drop
one. Writes go through the plane's one writer (``ControlPlane.write``), fenced as every write is,
so a plane that lost the store signs nobody in."""

from __future__ import annotations

from sqlalchemy import delete, func, insert, select

from xpupool.server.plane.secret_rows import Store
from xpupool.server.storage.web_sessions import web_sessions as t_sessions


def add(
    plane: Store, sid_hash: str, digest: str, created_at: float, *, expired_before: float, keep: int
) -> None:
    """Store a session; in the same transaction drop those created before ``expired_before``
    and, past ``keep`` rows, the oldest (sign-ins cannot grow the table without bound)."""
    with plane.write() as conn:
        conn.execute(delete(t_sessions).where(t_sessions.c.created_at < expired_before))
        conn.execute(
            insert(t_sessions).values(sid_hash=sid_hash, digest=digest, created_at=created_at)
        )
        count = int(conn.execute(select(func.count()).select_from(t_sessions)).scalar_one())
        if count > keep:
            oldest = select(t_sessions.c.sid_hash).order_by(t_sessions.c.created_at)
            doomed = oldest.limit(count - keep).scalar_subquery()
            conn.execute(delete(t_sessions).where(t_sessions.c.sid_hash.in_(doomed)))


def find(plane: Store, sid_hash: str) -> tuple[str, float] | None:
    """(token hash, created at) of the session, or None."""
    q = select(t_sessions.c.digest, t_sessions.c.created_at).where(
        t_sessions.c.sid_hash == sid_hash
    )
    with plane.db.connect() as conn:
        row = conn.execute(q).first()
    return None if row is None else (str(row[0]), float(row[1]))


def remove(plane: Store, sid_hash: str) -> None:
    with plane.write() as conn:
        conn.execute(delete(t_sessions).where(t_sessions.c.sid_hash == sid_hash))
