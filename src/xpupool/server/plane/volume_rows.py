"""The store's side of volumes (``server/services/volumes.py`` is the API's side). Volumes change
no book of the plane; their writes go through the plane's one writer, as secrets' do."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import Connection, delete, insert, select, update

from xpupool.server.plane.secret_rows import Store
from xpupool.server.storage.volumes import volumes as t_volumes


def put(plane: Store, name: str, values: dict[str, Any], now: float) -> bool:
    """Create or replace volume ``name``; whether it is new."""
    with plane.write() as conn:
        where = t_volumes.c.name == name
        if conn.execute(update(t_volumes).where(where).values(**values)).rowcount:
            return False
        conn.execute(insert(t_volumes).values(name=name, created_at=now, **values))
        return True


def remove(plane: Store, name: str) -> bool:
    with plane.write() as conn:
        return bool(conn.execute(delete(t_volumes).where(t_volumes.c.name == name)).rowcount)


def listed(conn: Connection, names: Iterable[str] | None = None) -> list[dict[str, Any]]:
    """Every volume (or those of ``names``), by name."""
    q = select(t_volumes).order_by(t_volumes.c.name)
    if names is not None:
        q = q.where(t_volumes.c.name.in_(sorted(set(names))))
    return [dict(r._mapping) for r in conn.execute(q)]
