"""/v1/tenants, /v1/tokens and /v1/queues."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request

from xpupool.server.routers.deps import Admin, Plane, User
from xpupool.server.schemas.base import NAME_PATTERN
from xpupool.server.schemas.queues import Queue, QueueIn
from xpupool.server.schemas.tenants import Tenant, TenantIn, TenantPatch, Token, TokenIn
from xpupool.server.services import tenants

router = APIRouter(prefix="/v1", tags=["tenants and queues"])
NameParam = Annotated[str, Path(pattern=NAME_PATTERN, max_length=63)]


@router.post("/tenants", status_code=201, response_model=Tenant)
def create_tenant(body: TenantIn, plane: Plane, _: Admin, request: Request) -> Tenant:
    """Create a tenant and its default queue (same name, no quota)."""
    request.state.audit_target = f"tenant {body.name}"
    return tenants.create_tenant(plane, body)


@router.get("/tenants", response_model=list[Tenant])
def list_tenants(plane: Plane, _: Admin) -> list[Tenant]:
    """Tenants with their limits and their queued work now."""
    return tenants.list_tenants(plane)


@router.patch("/tenants/{tenant}", response_model=Tenant)
def update_tenant(tenant: NameParam, body: TenantPatch, plane: Plane, _: Admin) -> Tenant:
    """Change a tenant's weight or limits; the fields left out stay as they are."""
    return tenants.update_tenant(plane, tenant, body)


@router.post("/tenants/{tenant}/tokens", status_code=201, response_model=Token)
def issue_token(
    tenant: NameParam, body: TokenIn, plane: Plane, _: Admin, request: Request
) -> Token:
    """Issue a token; the secret is in the answer once and never again."""
    request.state.audit_target = f"{body.role} token of tenant {tenant}"
    token = tenants.issue_token(plane, tenant, body)
    request.state.audit_target = f"{body.role} token {token.id} of tenant {tenant}"
    return token


@router.post("/tokens", status_code=201, response_model=Token)
def issue_agent_token(body: TokenIn, plane: Plane, _: Admin, request: Request) -> Token:
    """Issue an agent token (``node``: the node it speaks for), a one-time bootstrap token
    (``bootstrap``) or a metrics token (role ``metrics``: reads /metrics only); the secret is in
    the answer once and never again."""
    node = f" for node {body.node}" if body.node else ""
    request.state.audit_target = f"{body.role} token{node}"
    token = tenants.issue_token(plane, None, body)
    request.state.audit_target = f"{body.role} token {token.id}{node}"
    return token


@router.get("/tokens", response_model=list[Token])
def list_tokens(plane: Plane, _: Admin) -> list[Token]:
    return tenants.list_tokens(plane)


@router.delete("/tokens/{token_id}", status_code=204)
def revoke_token(token_id: Annotated[int, Path(ge=1, le=1 << 62)], plane: Plane, me: Admin) -> None:
    tenants.revoke_token(plane, token_id, me)


@router.put("/queues/{name}", response_model=Queue)
def put_queue(name: NameParam, body: QueueIn, plane: Plane, _: Admin) -> Queue:
    """Create or replace a queue and its quotas."""
    if body.name != name:
        from xpupool.model.errors import RequestError

        raise RequestError("name", body.name, f"must match the path ({name!r})")
    return tenants.put_queue(plane, body)


@router.get("/queues", response_model=list[Queue])
def list_queues(plane: Plane, me: User) -> list[Queue]:
    return tenants.list_queues(plane, me)


@router.get("/queues/{name}", response_model=Queue)
def get_queue(name: NameParam, plane: Plane, me: User) -> Queue:
    return tenants.get_queue(plane, name, me)
