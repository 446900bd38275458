"""/v1/secrets: a tenant's secrets, written once and never read back."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Request, Response

from xpupool.server.routers.deps import Admin, Plane, User
from xpupool.server.schemas.base import NAME_PATTERN
from xpupool.server.schemas.secrets import KeyRotation, Secret, SecretIn
from xpupool.server.services import secrets

router = APIRouter(prefix="/v1", tags=["secrets"])
NameParam = Annotated[str, Path(pattern=NAME_PATTERN, max_length=63)]
TenantParam = Annotated[
    str | None,
    Query(
        max_length=63,
        description="Admin only: whose secrets these are (none: the admin's own, such as a"
        " Kubernetes site's kubeconfig)",
    ),
]


@router.put("/secrets/{name}", response_model=Secret)
def set_secret(
    name: NameParam,
    body: SecretIn,
    plane: Plane,
    me: User,
    request: Request,
    response: Response,
    tenant: TenantParam = None,
) -> Secret:
    """Create or replace a secret; the answer names it and never carries the value (201 when
    new, 200 when replaced)."""
    owner = secrets.owner(plane, me, tenant)
    request.state.audit_target = _target(name, owner)
    secret, created = secrets.set_secret(plane, owner, name, body)
    response.status_code = 201 if created else 200
    return secret


@router.get("/secrets", response_model=list[Secret])
def list_secrets(plane: Plane, me: User, tenant: TenantParam = None) -> list[Secret]:
    """The caller's secrets (an admin's: the named tenant's), by name, without their values."""
    return secrets.list_secrets(plane, secrets.owner(plane, me, tenant))


@router.delete("/secrets/{name}", status_code=204)
def delete_secret(
    name: NameParam, plane: Plane, me: User, request: Request, tenant: TenantParam = None
) -> None:
    """Delete a secret; jobs already given it keep what they were given."""
    owner = secrets.owner(plane, me, tenant)
    request.state.audit_target = _target(name, owner)
    secrets.delete_secret(plane, owner, name)


@router.post("/secrets/rotate-key", response_model=KeyRotation)
def rotate_key(plane: Plane, _: Admin, request: Request) -> KeyRotation:
    """Seal every secret again under a new key, which then replaces the old key file."""
    request.state.audit_target = "the secret key"
    return secrets.rotate_key(plane)


def _target(name: str, owner: str | None) -> str:
    return f"secret {name} of " + ("the admin" if owner is None else f"tenant {owner}")
