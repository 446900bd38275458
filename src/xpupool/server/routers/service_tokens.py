"""/v1/services/NAME/tokens: per-service tokens, which reach that service's proxy and nothing
else (``service_access.py``). Issued by the owning tenant (or the admin, naming the tenant),
shown once, stored hashed, revocable; issuing and revoking are audited."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Request, Response

from xpupool.model.errors import Forbidden, NotFound, RequestError
from xpupool.server.auth import Principal, token_hash
from xpupool.server.client_address import client_address
from xpupool.server.plane import ControlPlane
from xpupool.server.plane import service_token_rows as rows
from xpupool.server.plane.tenant_store import tenant_exists
from xpupool.server.routers.deps import Plane, User, model_response
from xpupool.server.schemas.base import NAME_PATTERN
from xpupool.server.schemas.service_tokens import ServiceToken, ServiceTokenIn
from xpupool.server.service_access import ServiceTokenCache, new_service_token

router = APIRouter(prefix="/v1/services", tags=["services"])
NameParam = Annotated[str, Path(pattern=NAME_PATTERN, max_length=63)]
TenantParam = Annotated[
    str | None, Query(max_length=63, description="Admin only: whose service this is")
]


def _owner(plane: ControlPlane, who: Principal, tenant: str | None) -> str:
    if who.is_admin:
        if tenant is None:
            raise RequestError("tenant", None, "the admin names the tenant whose service this is")
        with plane.db.connect() as conn:
            if not tenant_exists(conn, tenant):
                raise NotFound("tenant", tenant)
        return tenant
    if who.tenant is None:
        raise Forbidden("only a tenant or the admin has services")
    if tenant is not None and tenant != who.tenant:
        raise Forbidden(f"tenant {who.tenant!r} cannot reach tenant {tenant!r}'s services")
    return who.tenant


def _cache(request: Request) -> ServiceTokenCache:
    cache: ServiceTokenCache = request.app.state.service_tokens
    return cache


@router.post("/{name}/tokens", status_code=201, response_model=ServiceToken)
def issue_service_token(
    name: NameParam,
    body: ServiceTokenIn,
    plane: Plane,
    me: User,
    request: Request,
    tenant: TenantParam = None,
) -> Response:
    """Issue a token that calls service NAME's proxy only; its secret is in this answer and
    never again. The service need not exist yet (a token can be handed out before the first
    deploy); it reaches the service of that name of this tenant, whenever there is one."""
    owner = _owner(plane, me, tenant)
    secret = new_service_token()
    now = plane.clock()
    row = {"tenant": owner, "service": name, "name": body.name, "hash": token_hash(secret)}
    request.state.audit_target = f"service token of service {name} of tenant {owner}"
    audit = None if me.is_admin else plane.audit  # the admin's request is audited as such
    token_id = rows.issue(
        plane, audit, me, {**row, "created_at": now}, client_address(request.scope)
    )
    request.state.audit_target = f"service token {token_id} of service {name} of tenant {owner}"
    token = ServiceToken(
        id=token_id,
        tenant=owner,
        service=name,
        name=body.name,
        created_at=now,
        revoked=False,
        token=secret,
    )
    return model_response(token, 201)


@router.get("/{name}/tokens", response_model=list[ServiceToken])
def list_service_tokens(
    name: NameParam, plane: Plane, me: User, tenant: TenantParam = None
) -> list[ServiceToken]:
    """Service NAME's tokens, revoked ones included, never their secrets."""
    owner = _owner(plane, me, tenant)
    return [ServiceToken.model_validate(r) for r in rows.listed(plane, owner, name)]


@router.delete("/{name}/tokens/{token_id}", status_code=204)
def revoke_service_token(
    name: NameParam,
    token_id: int,
    plane: Plane,
    me: User,
    request: Request,
    tenant: TenantParam = None,
) -> None:
    """Revoke a token: the proxy refuses its next request (401)."""
    owner = _owner(plane, me, tenant)
    request.state.audit_target = f"service token {token_id} of service {name} of tenant {owner}"
    audit = None if me.is_admin else plane.audit
    if not rows.revoke(plane, audit, me, owner, name, token_id, client_address(request.scope)):
        raise NotFound("service token", str(token_id))
    _cache(request).forget(token_id)
