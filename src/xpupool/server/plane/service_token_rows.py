"""The store's side of per-service tokens (``storage/service_tokens.py``): issue, list, revoke,
and the one lookup the proxy makes for a token it has not cached yet
(``server/service_proxy.py``). Writes go through the plane's one writer, with their audit row in
the same transaction (a refused write leaves neither)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import insert, select, update

from xpupool.server.audit import AuditLog
from xpupool.server.auth import Principal
from xpupool.server.plane.secret_rows import Store
from xpupool.server.storage.service_tokens import service_tokens as t_tokens

LISTED = (
    t_tokens.c.id,
    t_tokens.c.tenant,
    t_tokens.c.service,
    t_tokens.c.name,
    t_tokens.c.created_at,
    t_tokens.c.revoked,
)


def issue(
    plane: Store,
    audit: AuditLog | None,
    who: Principal,
    row: dict[str, Any],
    source: str | None,
) -> int:
    """Store ``row`` (tenant, service, name, hash, created_at); its id. ``audit`` None: the
    request's own audit row says it (an admin's, ``audit_http.py``)."""
    with plane.write() as conn:
        done = conn.execute(insert(t_tokens).values(revoked=False, **row))
        token_id = int(done.inserted_primary_key[0])
        target = f"service token {token_id} of service {row['service']} of tenant {row['tenant']}"
        if audit is not None:
            audit.record(who, "issue_service_token", target, 201, "ok", conn=conn, source=source)
    return token_id


def listed(plane: Store, tenant: str, service: str) -> list[dict[str, Any]]:
    """``tenant``'s tokens for ``service``, oldest first, revoked ones included (never a hash)."""
    q = (
        select(*LISTED)
        .where((t_tokens.c.tenant == tenant) & (t_tokens.c.service == service))
        .order_by(t_tokens.c.id)
    )
    with plane.db.connect() as conn:
        return [dict(r._mapping) for r in conn.execute(q)]


def revoke(
    plane: Store,
    audit: AuditLog | None,
    who: Principal,
    tenant: str,
    service: str,
    token_id: int,
    source: str | None,
) -> bool:
    """Revoke ``tenant``'s token ``token_id`` of ``service``; False when there is no such token
    (another tenant's or another service's included: nothing is said of those)."""
    where = (
        (t_tokens.c.id == token_id)
        & (t_tokens.c.tenant == tenant)
        & (t_tokens.c.service == service)
        & t_tokens.c.revoked.is_(False)
    )
    with plane.write() as conn:
        if not conn.execute(update(t_tokens).where(where).values(revoked=True)).rowcount:
            return False
        target = f"service token {token_id} of service {service} of tenant {tenant}"
        if audit is not None:
            audit.record(who, "revoke_service_token", target, 204, "ok", conn=conn, source=source)
    return True


def live(plane: Store, digest: str) -> tuple[int, str, str] | None:
    """(id, tenant, service) of the live token whose SHA-256 is ``digest``."""
    q = select(t_tokens.c.id, t_tokens.c.tenant, t_tokens.c.service).where(
        (t_tokens.c.hash == digest) & t_tokens.c.revoked.is_(False)
    )
    with plane.db.connect() as conn:
        row = conn.execute(q).first()
    return None if row is None else (int(row.id), str(row.tenant), str(row.service))
