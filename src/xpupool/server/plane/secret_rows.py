"""The store's side of tenants' secrets: sealed rows in, sealed rows out (``server/secret_box.py``
seals and opens them; ``server/services/secrets.py`` is the API's side).

Secrets change no book of the plane; their writes go through the plane's one writer
(``ControlPlane.write``) so that a store that cannot write answers 503 and changes nothing, as
every other write does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol

from sqlalchemy import Connection, Engine, delete, insert, select, update

from xpupool.server.secret_box import Sealed
from xpupool.server.storage.secrets import secrets as t_secrets


class Store(Protocol):
    db: Engine

    def write(self) -> Any: ...


def put(plane: Store, tenant: str, name: str, sealed: Sealed, size: int, now: float) -> bool:
    """Store ``sealed`` as ``tenant``'s secret ``name``; whether it is new (else replaced)."""
    with plane.write() as conn:
        cols = {"key_id": sealed.key_id, "sealed": sealed.data, "size": size, "updated_at": now}
        where = (t_secrets.c.tenant == tenant) & (t_secrets.c.name == name)
        if conn.execute(update(t_secrets).where(where).values(**cols)).rowcount:
            return False
        conn.execute(insert(t_secrets).values(tenant=tenant, name=name, created_at=now, **cols))
        return True


def remove(plane: Store, tenant: str, name: str) -> bool:
    with plane.write() as conn:
        where = (t_secrets.c.tenant == tenant) & (t_secrets.c.name == name)
        return bool(conn.execute(delete(t_secrets).where(where)).rowcount)


def listed(plane: Store, tenant: str) -> list[dict[str, Any]]:
    """``tenant``'s secrets by name: name, size and times (never the sealed value)."""
    cols = [t_secrets.c.name, t_secrets.c.size, t_secrets.c.created_at, t_secrets.c.updated_at]
    q = select(*cols).where(t_secrets.c.tenant == tenant).order_by(t_secrets.c.name)
    with plane.db.connect() as conn:
        return [dict(r._mapping) for r in conn.execute(q)]


def sealed(conn: Connection, tenant: str, names: Iterable[str]) -> dict[str, Sealed]:
    """The sealed values of ``tenant``'s secrets ``names`` that exist."""
    wanted = sorted(set(names))
    q = select(t_secrets.c.name, t_secrets.c.key_id, t_secrets.c.sealed).where(
        (t_secrets.c.tenant == tenant) & t_secrets.c.name.in_(wanted)
    )
    return {r.name: Sealed(r.key_id, bytes(r.sealed)) for r in conn.execute(q)}


def names(conn: Connection, tenant: str, wanted: Iterable[str]) -> set[str]:
    """Which of ``wanted`` are ``tenant``'s secrets."""
    q = select(t_secrets.c.name).where(
        (t_secrets.c.tenant == tenant) & t_secrets.c.name.in_(sorted(set(wanted)))
    )
    return {r[0] for r in conn.execute(q)}


def key_ids(plane: Store) -> set[str]:
    """The keys the stored values are sealed under (one, but for a rotation cut off half way)."""
    with plane.db.connect() as conn:
        return {r[0] for r in conn.execute(select(t_secrets.c.key_id).distinct())}


def reseal_all(plane: Store, reseal: Callable[[str, str, Sealed], Sealed]) -> int:
    """Every stored value re-sealed by ``reseal``, in one transaction; how many."""
    with plane.write() as conn:
        rows = conn.execute(
            select(t_secrets.c.tenant, t_secrets.c.name, t_secrets.c.key_id, t_secrets.c.sealed)
        ).all()
        for r in rows:
            new = reseal(r.tenant, r.name, Sealed(r.key_id, bytes(r.sealed)))
            where = (t_secrets.c.tenant == r.tenant) & (t_secrets.c.name == r.name)
            conn.execute(update(t_secrets).where(where).values(key_id=new.key_id, sealed=new.data))
        return len(rows)
