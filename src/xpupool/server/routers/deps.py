"""Dependencies every router shares: the plane and who is calling.

They are coroutines: FastAPI runs a plain function dependency in its thread pool, one thread hop
per dependency per request, and these only read memory (a token's principal is cached; the store
is read once per token, on PostgreSQL on a thread: ``store_off_loop.py``). The thread pool's
hand-offs showed in the server's profile under load (issue 25; docs/benchmarks.md and its
history)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Literal

from fastapi import Depends, HTTPException, Request, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel

from xpupool.server.auth import Principal, TokenExpired
from xpupool.server.plane import ControlPlane
from xpupool.server.schemas.agent_protocol import AGENT_PROTOCOL, AGENT_PROTOCOL_HEADER
from xpupool.server.services import tenants
from xpupool.server.store_off_loop import on_store

_bearer = HTTPBearer(auto_error=False, description="A token from `xpupool up` or the admin.")


async def plane(request: Request) -> ControlPlane:
    p: ControlPlane = request.app.state.plane
    return p


Plane = Annotated[ControlPlane, Depends(plane)]


async def principal(
    request: Request,
    creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    plane: ControlPlane = request.app.state.plane
    pair = None if creds is None else (creds.scheme, creds.credentials)
    if pair is None or plane.store_is_local or tenants.is_cached(plane, pair[1]):
        who = bearer_principal(plane, pair)
    else:  # a token not seen yet: read from the store
        who = await on_store(plane, bearer_principal, plane, pair)
    request.state.principal = who  # for the audit log (server/audit_http.py)
    return who


def bearer_principal(plane: ControlPlane, creds: tuple[str, str] | None) -> Principal:
    """Who ``creds`` (the Authorization header's scheme and credentials) acts as; 401 when
    missing, unknown, revoked or expired."""
    if creds is None or creds[0].lower() != "bearer":
        raise HTTPException(401, "missing bearer token", headers={"WWW-Authenticate": "Bearer"})
    try:
        who = tenants.authenticate(plane, creds[1])
    except TokenExpired as exc:
        when = datetime.fromtimestamp(exc.expires_at, UTC).isoformat(timespec="seconds")
        raise HTTPException(
            401, f"token expired at {when}", headers={"WWW-Authenticate": "Bearer"}
        ) from None
    if who is None:
        raise HTTPException(401, "unknown or revoked token", headers={"WWW-Authenticate": "Bearer"})
    return who


async def user(who: Annotated[Principal, Depends(principal)]) -> Principal:
    """Admin or tenant (agent and bootstrap tokens only speak the agent protocol)."""
    check_user(who)
    return who


def check_user(who: Principal) -> None:
    """403 unless ``who`` is the admin or a tenant."""
    if who.role == "metrics":
        raise HTTPException(403, "metrics tokens may only read /metrics")
    if who.role not in ("admin", "tenant"):
        raise HTTPException(403, f"{who.role} tokens may only use /v1/agent endpoints")


async def admin(who: Annotated[Principal, Depends(principal)]) -> Principal:
    if not who.is_admin:
        raise HTTPException(
            403,
            "admin only: this needs the admin token (DATA/admin-token of xpupool up; "
            "give it with --token or XPUPOOL_TOKEN), not a tenant's",
        )
    return who


async def agent(request: Request, who: Annotated[Principal, Depends(principal)]) -> Principal:
    """An agent, bootstrap or admin credential speaking this server's agent protocol. The admin
    may leave the version header out (scripts, curl); an agent may not: an agent of another
    release is told both versions (426) instead of being misread."""
    if who.role not in ("agent", "bootstrap", "admin"):
        raise HTTPException(403, "agent or admin token required")
    sent = request.headers.get(AGENT_PROTOCOL_HEADER)
    if sent is None and who.is_admin:
        return who
    if sent != str(AGENT_PROTOCOL):
        said = f"agent protocol 1 (no {AGENT_PROTOCOL_HEADER} header)"
        if sent:
            said = f"agent protocol {sent[:20]}"
        raise HTTPException(
            426,
            f"this agent speaks {said}; this server speaks agent protocol {AGENT_PROTOCOL}: "
            "run an agent of the server's release",
            headers={AGENT_PROTOCOL_HEADER: str(AGENT_PROTOCOL)},
        )
    return who


MetricsAuth = Literal["token", "open"]
"""Who may read ``/metrics`` (``xpupool up --metrics-auth``): 'token', the admin token or a
metrics token (``POST /v1/tokens {"role": "metrics"}``); 'open', anyone who reaches the port."""


async def metrics_reader(
    request: Request,
    creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal | None:
    """Who reads the metrics, which name every tenant, queue and node: the admin or a metrics
    token, else 401/403; None (no check) when the server was started ``--metrics-auth open``."""
    if request.app.state.metrics_auth == "open":
        return None
    who = await principal(request, creds)
    if who.role not in ("admin", "metrics"):
        raise HTTPException(
            403,
            "the metrics need the admin token or a metrics token (xpupool token issue --metrics),"
            " or a server started with --metrics-auth open",
        )
    return who


def model_response(model: BaseModel, status: int = 200) -> Response:
    """``model`` as the JSON body FastAPI would write for it as the route's ``response_model``
    (the route keeps declaring it, for the OpenAPI schema). Returned as a response, the model is
    not validated again against its own class, which a plain function route does in one more
    thread hop (issue 25)."""
    return Response(model.model_dump_json(by_alias=True), status, media_type="application/json")


User = Annotated[Principal, Depends(user)]
Admin = Annotated[Principal, Depends(admin)]
Agent = Annotated[Principal, Depends(agent)]
MetricsReader = Annotated[Principal | None, Depends(metrics_reader)]
