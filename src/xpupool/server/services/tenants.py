"""Tenants, tokens and queues. Only the admin creates tenants, tokens and queues; a tenant reads
its own queues. A new tenant gets a queue of its own name with no quota (any device, as much as
fits) so that it can submit at once; the admin narrows it with quotas when the pool is shared."""

from __future__ import annotations

from sqlalchemy import Connection, insert, select, update

from xpupool.model.errors import Conflict, NotFound
from xpupool.server import schemas as s
from xpupool.server.auth import Principal, new_token, token_hash
from xpupool.server.plane import ControlPlane, queue_spec
from xpupool.server.storage.tenants import queues as t_queues
from xpupool.server.storage.tenants import tenants as t_tenants
from xpupool.server.storage.tenants import tokens as t_tokens


def ensure_admin_token(plane: ControlPlane) -> str | None:
    """Create the admin token on first start and return it; None when one exists already."""
    with plane.write() as conn:
        found = conn.execute(select(t_tokens.c.id).where(t_tokens.c.role == "admin")).first()
        if found is not None:
            return None
        token = new_token()
        conn.execute(
            insert(t_tokens).values(
                tenant=None,
                role="admin",
                name="admin",
                hash=token_hash(token),
                created_at=plane.clock(),
                revoked=False,
            )
        )
        return token


def authenticate(plane: ControlPlane, token: str) -> Principal | None:
    """The principal of a live token. Valid tokens are cached by hash (every request authenticates;
    a store query each time is most of a small request's cost); revoking clears the cache."""
    digest = token_hash(token)
    found = plane.principals.get(digest)
    if found is not None:
        return found
    with plane.db.connect() as conn:
        row = conn.execute(
            select(t_tokens).where(t_tokens.c.hash == digest, t_tokens.c.revoked.is_(False))
        ).first()
    if row is None:
        return None
    who = Principal(row.id, row.role, row.tenant)
    plane.principals[digest] = who
    return who


def create_tenant(plane: ControlPlane, body: s.TenantIn) -> s.Tenant:
    now = plane.clock()
    with plane.write() as conn:
        if conn.execute(select(t_tenants).where(t_tenants.c.name == body.name)).first():
            raise Conflict(f"tenant {body.name!r} already exists")
        if conn.execute(select(t_queues).where(t_queues.c.name == body.name)).first():
            raise Conflict(f"a queue named {body.name!r} already exists")
        conn.execute(insert(t_tenants).values(name=body.name, weight=body.weight, created_at=now))
        conn.execute(
            insert(t_queues).values(
                name=body.name, tenant=body.name, cohort=None, quotas=[], created_at=now
            )
        )
        plane.queue_specs[body.name] = queue_spec(body.name, body.name, None, [], body.weight)
        plane.rebuild_admission()
    return s.Tenant(name=body.name, weight=body.weight, created_at=now)


def list_tenants(plane: ControlPlane) -> list[s.Tenant]:
    with plane.db.connect() as conn:
        rows = conn.execute(select(t_tenants).order_by(t_tenants.c.name)).mappings().all()
    return [s.Tenant.model_validate(dict(r)) for r in rows]


def _tenant_exists(conn: Connection, name: str) -> bool:
    return (
        conn.execute(select(t_tenants.c.name).where(t_tenants.c.name == name)).first() is not None
    )


def issue_token(plane: ControlPlane, tenant: str, body: s.TokenIn) -> s.Token:
    token = new_token()
    now = plane.clock()
    with plane.write() as conn:
        if not _tenant_exists(conn, tenant):
            raise NotFound("tenant", tenant)
        result = conn.execute(
            insert(t_tokens).values(
                tenant=tenant if body.role == "tenant" else None,
                role=body.role,
                name=body.name,
                hash=token_hash(token),
                created_at=now,
                revoked=False,
            )
        )
        token_id = int(result.inserted_primary_key[0])  # type: ignore[index]
    return s.Token(
        id=token_id,
        tenant=tenant if body.role == "tenant" else None,
        role=body.role,
        name=body.name,
        created_at=now,
        revoked=False,
        token=token,
    )


def list_tokens(plane: ControlPlane) -> list[s.Token]:
    with plane.db.connect() as conn:
        rows = conn.execute(select(t_tokens).order_by(t_tokens.c.id)).mappings().all()
    return [s.Token.model_validate({**dict(r), "token": None}) for r in rows]


def revoke_token(plane: ControlPlane, token_id: int, me: Principal) -> None:
    if token_id == me.token_id:
        raise Conflict("a token cannot revoke itself")
    with plane.write() as conn:
        done = conn.execute(
            update(t_tokens).where(t_tokens.c.id == token_id).values(revoked=True)
        ).rowcount
        plane.principals.clear()
    if not done:
        raise NotFound("token", str(token_id))


# ------------------------------------------------------------------------------------ queues
def put_queue(plane: ControlPlane, body: s.QueueIn) -> s.Queue:
    """Create or replace a queue. Lowering a quota below current use evicts nothing: running work
    stays, and the queue admits again once it is back under (Kueue behaves the same)."""
    quotas = [q.model_dump(mode="json") for q in body.quotas]
    with plane.write() as conn:
        tenant = conn.execute(select(t_tenants).where(t_tenants.c.name == body.tenant)).first()
        if tenant is None:
            raise NotFound("tenant", body.tenant)
        existing = conn.execute(select(t_queues).where(t_queues.c.name == body.name)).first()
        if existing is not None and existing.tenant != body.tenant:
            raise Conflict(f"queue {body.name!r} belongs to tenant {existing.tenant!r}")
        values = {"tenant": body.tenant, "cohort": body.cohort, "quotas": quotas}
        if existing is None:
            conn.execute(
                insert(t_queues).values(name=body.name, created_at=plane.clock(), **values)
            )
        else:
            conn.execute(update(t_queues).where(t_queues.c.name == body.name).values(**values))
        plane.queue_specs[body.name] = queue_spec(
            body.name, body.tenant, body.cohort, quotas, tenant.weight
        )
        plane.rebuild_admission()
    return get_queue(plane, body.name, None)


def _visible(plane: ControlPlane, name: str, me: Principal | None) -> None:
    spec = plane.queue_specs.get(name)
    if spec is None or (me is not None and not me.is_admin and spec.tenant != me.tenant):
        raise NotFound("queue", name)


def get_queue(plane: ControlPlane, name: str, me: Principal | None) -> s.Queue:
    with plane.lock:
        _visible(plane, name, me)
        return _queue_view(plane, name)


def list_queues(plane: ControlPlane, me: Principal) -> list[s.Queue]:
    with plane.lock:
        names = [
            n for n, q in sorted(plane.queue_specs.items()) if me.is_admin or q.tenant == me.tenant
        ]
        return [_queue_view(plane, n) for n in names]


def _queue_view(plane: ControlPlane, name: str) -> s.Queue:
    spec = plane.queue_specs[name]
    usage = plane.admission.usage.get(name, {})
    quotas = [
        s.QuotaUsage(
            flavor=q.flavor,
            resource=s.QuotaResource(q.resource.value),
            nominal=q.nominal,
            borrowing_limit=q.borrowing_limit,
            used=int(usage.get((q.flavor, q.resource), 0)),
        )
        for q in spec.quotas
    ]
    pending = sum(1 for p in plane.pending.values() if p.queue == name)
    running = sum(1 for h in plane.held.values() if h.queue == name)
    return s.Queue(
        name=name,
        tenant=spec.tenant,
        cohort=spec.cohort,
        quotas=quotas,
        pending=pending,
        running=running,
    )
