"""The store's side of tenants' secrets and the admin's own: sealed rows in, sealed rows out
(``server/secret_box.py`` seals and opens them; ``server/services/secrets.py`` is the API's side).

An owner is a tenant's name, or None for the admin's own secrets (the plane's credentials, such as
a Kubernetes site's kubeconfig), kept in a table of their own that no tenant reaches. They are
sealed with :data:`ADMIN` as the owner in the sealing's associated data: no tenant's name is
empty, so a value sealed for the admin does not open as a tenant's, nor the other way round.

Secrets change no book of the plane; their writes go through the plane's one writer
(``ControlPlane.write``) so that a store that cannot write answers 503 and changes nothing, as
every other write does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol

from sqlalchemy import ColumnElement, Connection, Engine, Table, delete, insert, select, update

from xpupool.server.secret_box import Sealed
from xpupool.server.storage.secrets import plane_secrets as t_plane_secrets
from xpupool.server.storage.secrets import secrets as t_secrets

ADMIN = ""  # the owner the admin's own secrets are sealed under (secret_box's associated data)


class Store(Protocol):
    db: Engine

    def write(self) -> Any: ...


def _of(tenant: str | None) -> tuple[Table, ColumnElement[bool] | None, dict[str, str]]:
    """The table of ``tenant``'s secrets (None: the admin's own), the condition that picks its
    rows there (None: all), and the owner's columns of a new row."""
    if tenant is None:
        return t_plane_secrets, None, {}
    return t_secrets, t_secrets.c.tenant == tenant, {"tenant": tenant}


def _where(owner: ColumnElement[bool] | None, cond: ColumnElement[bool]) -> Any:
    return cond if owner is None else owner & cond


def put(plane: Store, tenant: str | None, name: str, sealed: Sealed, size: int, now: float) -> bool:
    """Store ``sealed`` as ``tenant``'s secret ``name`` (None: the admin's own); whether it is
    new (else replaced)."""
    table, owner, new = _of(tenant)
    with plane.write() as conn:
        cols = {"key_id": sealed.key_id, "sealed": sealed.data, "size": size, "updated_at": now}
        where = _where(owner, table.c.name == name)
        if conn.execute(update(table).where(where).values(**cols)).rowcount:
            return False
        conn.execute(insert(table).values(**new, name=name, created_at=now, **cols))
        return True


def remove(plane: Store, tenant: str | None, name: str) -> bool:
    table, owner, _ = _of(tenant)
    with plane.write() as conn:
        where = _where(owner, table.c.name == name)
        return bool(conn.execute(delete(table).where(where)).rowcount)


def listed(plane: Store, tenant: str | None) -> list[dict[str, Any]]:
    """``tenant``'s secrets (None: the admin's own) by name: name, size and times (never the
    sealed value)."""
    table, owner, _ = _of(tenant)
    cols = [table.c.name, table.c.size, table.c.created_at, table.c.updated_at]
    q = select(*cols).order_by(table.c.name)
    if owner is not None:
        q = q.where(owner)
    with plane.db.connect() as conn:
        return [dict(r._mapping) for r in conn.execute(q)]


def sealed(conn: Connection, tenant: str | None, names: Iterable[str]) -> dict[str, Sealed]:
    """The sealed values of ``tenant``'s secrets ``names`` that exist (None: the admin's own)."""
    table, owner, _ = _of(tenant)
    wanted = sorted(set(names))
    q = select(table.c.name, table.c.key_id, table.c.sealed).where(
        _where(owner, table.c.name.in_(wanted))
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
        return {
            r[0]
            for table in (t_secrets, t_plane_secrets)
            for r in conn.execute(select(table.c.key_id).distinct())
        }


def reseal_all(plane: Store, reseal: Callable[[str, str, Sealed], Sealed]) -> int:
    """Every stored value, tenants' and the admin's own (sealed under :data:`ADMIN`),
    re-sealed by ``reseal``, in one transaction; how many."""
    with plane.write() as conn:
        rows = conn.execute(
            select(t_secrets.c.tenant, t_secrets.c.name, t_secrets.c.key_id, t_secrets.c.sealed)
        ).all()
        for r in rows:
            new = reseal(r.tenant, r.name, Sealed(r.key_id, bytes(r.sealed)))
            where = (t_secrets.c.tenant == r.tenant) & (t_secrets.c.name == r.name)
            conn.execute(update(t_secrets).where(where).values(key_id=new.key_id, sealed=new.data))
        own = conn.execute(
            select(t_plane_secrets.c.name, t_plane_secrets.c.key_id, t_plane_secrets.c.sealed)
        ).all()
        for r in own:
            new = reseal(ADMIN, r.name, Sealed(r.key_id, bytes(r.sealed)))
            conn.execute(
                update(t_plane_secrets)
                .where(t_plane_secrets.c.name == r.name)
                .values(key_id=new.key_id, sealed=new.data)
            )
        return len(rows) + len(own)
