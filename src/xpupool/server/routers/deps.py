"""Dependencies every router shares: the plane and who is calling."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from xpupool.server.auth import Principal
from xpupool.server.plane import ControlPlane
from xpupool.server.services import tenants

_bearer = HTTPBearer(auto_error=False, description="A token from `xpupool up` or the admin.")


def plane(request: Request) -> ControlPlane:
    p: ControlPlane = request.app.state.plane
    return p


Plane = Annotated[ControlPlane, Depends(plane)]


def principal(
    request: Request,
    creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    if creds is None or creds.scheme.lower() != "bearer":
        raise HTTPException(401, "missing bearer token", headers={"WWW-Authenticate": "Bearer"})
    who = tenants.authenticate(request.app.state.plane, creds.credentials)
    if who is None:
        raise HTTPException(401, "unknown or revoked token", headers={"WWW-Authenticate": "Bearer"})
    return who


def user(who: Annotated[Principal, Depends(principal)]) -> Principal:
    """Admin or tenant (agents only speak the agent protocol)."""
    if who.role == "agent":
        raise HTTPException(403, "agent tokens may only use /v1/agent endpoints")
    return who


def admin(who: Annotated[Principal, Depends(principal)]) -> Principal:
    if not who.is_admin:
        raise HTTPException(403, "admin only")
    return who


def agent(who: Annotated[Principal, Depends(principal)]) -> Principal:
    if who.role not in ("agent", "admin"):
        raise HTTPException(403, "agent or admin token required")
    return who


User = Annotated[Principal, Depends(user)]
Admin = Annotated[Principal, Depends(admin)]
Agent = Annotated[Principal, Depends(agent)]
