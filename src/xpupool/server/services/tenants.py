"""Tenants, tokens and queues. Only the admin creates tenants, tokens and queues; a tenant reads
its own queues. A new tenant gets a queue of its own name with no quota (any device, as much as
fits) so that it can submit at once; the admin narrows it with quotas when the pool is shared."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from xpupool.engine.profile import known_profile
from xpupool.model.errors import Conflict, NotFound, RequestError
from xpupool.server.auth import Principal, TokenExpired, new_token, token_hash
from xpupool.server.plane import ControlPlane
from xpupool.server.queue_spec import queue_spec, queue_spec_of
from xpupool.server.schemas.queues import (
    Queue,
    QueueIn,
    QueuePreemption,
    QuotaResource,
    QuotaUsage,
    UnlistedFlavors,
)
from xpupool.server.schemas.tenants import Tenant, TenantIn, TenantPatch, Token, TokenIn
from xpupool.server.services import grants
from xpupool.server.storage.tenants import queues as t_queues
from xpupool.server.storage.tenants import tenants as t_tenants
from xpupool.server.storage.tenants import tokens as t_tokens


def ensure_admin_token(plane: ControlPlane) -> str | None:
    """Create the admin token on first start and return it; None when one exists already."""
    return plane.ensure_admin_token()


def authenticate(plane: ControlPlane, token: str) -> Principal | None:
    """The principal of a live token; None for an unknown or revoked one, :class:`TokenExpired`
    for one past its expiry. Valid tokens are cached by hash (every request authenticates; a store
    query each time is most of a small request's cost); revoking or binding clears the cache."""
    return principal_of(plane, token_hash(token))


def is_cached(plane: ControlPlane, token: str) -> bool:
    """Whether :func:`authenticate` finds ``token`` without reading the store."""
    return plane.cached_principal(token_hash(token)) is not None


def principal_of(plane: ControlPlane, digest: str, *, store: bool = True) -> Principal | None:
    """:func:`authenticate` for the token whose SHA-256 is ``digest`` (what a dashboard session
    keeps instead of the token). ``store`` False: only a token already cached is found, without
    reading the store (the rate limiter asks so before it knows the caller may cost a query)."""
    who = plane.cached_principal(digest)
    if who is None and not store:
        return None
    if who is None:
        with plane.db.connect() as conn:
            row = conn.execute(
                select(t_tokens).where(t_tokens.c.hash == digest, t_tokens.c.revoked.is_(False))
            ).first()
        if row is None:
            return None
        nodes = None if row.node is None else frozenset({row.node})
        who = Principal(row.id, row.role, row.tenant, nodes, row.expires_at)
        plane.cache_principal(digest, who)
    if who.expires_at is not None and plane.clock() >= who.expires_at:
        raise TokenExpired(who.expires_at)
    return who


def create_tenant(plane: ControlPlane, body: TenantIn) -> Tenant:
    now = plane.clock()
    plane.add_tenant(
        body.model_dump(), queue_spec(body.name, body.name, None, [], body.weight), now
    )
    return Tenant(**body.model_dump(), created_at=now)


def list_tenants(plane: ControlPlane) -> list[Tenant]:
    with plane.db.connect() as conn:
        rows = conn.execute(select(t_tenants).order_by(t_tenants.c.name)).mappings().all()
    return plane.read(lambda: [_tenant_view(plane, r) for r in rows])


def _tenant_view(plane: ControlPlane, row: Any) -> Tenant:
    return Tenant.model_validate({**dict(row), **grants.usage(plane, row["name"])})


def update_tenant(plane: ControlPlane, name: str, patch: TenantPatch) -> Tenant:
    """Set the fields ``patch`` gives. A lower limit refuses new submissions only: what is
    queued stays queued. A new weight applies to the next scheduling pass."""
    row = plane.update_tenant(name, patch.model_dump(exclude_unset=True))
    return plane.read(lambda: _tenant_view(plane, row))


def issue_token(plane: ControlPlane, tenant: str | None, body: TokenIn) -> Token:
    """Issue a token. ``tenant`` None (``POST /v1/tokens``) issues agent, bootstrap and metrics
    tokens only; under a tenant, an agent token belongs to no tenant (as before node binding)."""
    if tenant is None and body.role == "tenant":
        raise RequestError(
            "role", body.role, "tenant tokens are issued under their tenant: /v1/tenants/{t}/tokens"
        )
    if tenant is not None and body.role == "metrics":
        raise RequestError(
            "role", body.role, "a metrics token belongs to no tenant: it is issued at /v1/tokens"
        )
    now = plane.clock()
    expires_at = body.expires_at
    if body.expires_in_s is not None:
        expires_at = now + body.expires_in_s
    elif expires_at is not None and expires_at <= now:
        raise RequestError("expires_at", expires_at, f"is in the past (now is {now:.0f})")
    role = "bootstrap" if body.bootstrap else body.role
    owner = tenant if role == "tenant" else None
    token = new_token(bootstrap=body.bootstrap)
    token_id = plane.add_token(
        tenant,
        {
            "tenant": owner,
            "role": role,
            "name": body.name,
            "hash": token_hash(token),
            "created_at": now,
            "revoked": False,
            "node": body.node,
            "expires_at": expires_at,
        },
    )
    return Token(
        id=token_id,
        tenant=owner,
        role=role,
        name=body.name,
        node=body.node,
        expires_at=expires_at,
        created_at=now,
        revoked=False,
        token=token,
    )


def list_tokens(plane: ControlPlane) -> list[Token]:
    with plane.db.connect() as conn:
        rows = conn.execute(select(t_tokens).order_by(t_tokens.c.id)).mappings().all()
    return [Token.model_validate({**dict(r), "token": None}) for r in rows]


def revoke_token(plane: ControlPlane, token_id: int, me: Principal) -> None:
    if token_id == me.token_id:
        raise Conflict("a token cannot revoke itself")
    if not plane.revoke_token(token_id):
        raise NotFound("token", str(token_id))


# ------------------------------------------------------------------------------------ queues
def put_queue(plane: ControlPlane, body: QueueIn) -> Queue:
    """Create or replace a queue. Lowering a quota below current use evicts nothing: running work
    stays, and the queue admits again once it is back under (Kueue behaves the same)."""
    quotas = [q.model_dump(mode="json") for q in body.quotas]
    if body.profile is not None:
        known_profile(plane.profiles, body.profile, "profile")
    values = {
        "tenant": body.tenant,
        "cohort": body.cohort,
        "quotas": quotas,
        "max_priority": body.max_priority,
        "preemption": body.preemption.value,
        "unlisted_flavors": body.unlisted_flavors.value,
        "allow_unfittable": int(body.allow_unfittable),
        "preempts_min_run": int(body.preempts_min_run),
        "profile": body.profile,
        "network": body.network,
    }
    plane.store_queue(
        body.name,
        values,
        lambda weight: queue_spec_of(body, weight),
        lambda conn: grants.cap_queued(plane, conn, body.name),  # a lowered cap: what waits too
    )
    return get_queue(plane, body.name, None)


def _visible(plane: ControlPlane, name: str, me: Principal | None) -> None:
    spec = plane.queue_specs.get(name)
    if spec is None or (me is not None and not me.is_admin and spec.tenant != me.tenant):
        raise NotFound("queue", name)


def _priority_caps(plane: ControlPlane) -> dict[str, tuple[int, str | None]]:
    """Each queue's priority cap and network, as stored."""
    with plane.db.connect() as conn:
        q = select(t_queues.c.name, t_queues.c.max_priority, t_queues.c.network)
        rows = conn.execute(q).all()
    return {r.name: (int(r.max_priority), r.network) for r in rows}


def get_queue(plane: ControlPlane, name: str, me: Principal | None) -> Queue:
    caps = _priority_caps(plane)

    def look() -> Queue:
        _visible(plane, name, me)
        return _queue_view(plane, name, *caps.get(name, (0, None)))

    return plane.read(look)


def list_queues(plane: ControlPlane, me: Principal) -> list[Queue]:
    caps = _priority_caps(plane)

    def look() -> list[Queue]:
        names = [
            n for n, q in sorted(plane.queue_specs.items()) if me.is_admin or q.tenant == me.tenant
        ]
        return [_queue_view(plane, n, *caps.get(n, (0, None))) for n in names]

    return plane.read(look)


def _queue_view(
    plane: ControlPlane, name: str, max_priority: int, network: str | None = None
) -> Queue:
    spec = plane.queue_specs[name]
    usage = plane.admission.usage.get(name, {})
    quotas = [
        QuotaUsage(
            flavor=q.flavor,
            resource=QuotaResource(q.resource.value),
            nominal=q.nominal,
            borrowing_limit=q.borrowing_limit,
            used=int(usage.get((q.flavor, q.resource), 0)),
        )
        for q in spec.quotas
    ]
    pending = sum(1 for p in plane.queued.values() if p.queue == name)
    running = sum(1 for h in plane.held_jobs.values() if h.queue == name)
    return Queue(
        name=name,
        tenant=spec.tenant,
        cohort=spec.cohort,
        max_priority=max_priority,
        preemption=QueuePreemption(spec.preemption.value),
        unlisted_flavors=UnlistedFlavors(spec.unlisted_flavors.value),
        allow_unfittable=spec.allow_unfittable,
        preempts_min_run=spec.preempts_min_run,
        profile=plane.queue_profiles.get(name),
        network=network,
        quotas=quotas,
        pending=pending,
        running=running,
    )
