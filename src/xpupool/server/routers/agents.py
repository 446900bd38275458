"""/v1/agent: registration, heartbeats (metrics and replica reports in, work out), log upload.

Every route acts as the caller's credential: an agent credential for its own node only
(``services/node_identity.py``).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Request

from xpupool.server.routers.deps import Agent, Plane
from xpupool.server.schemas.agent_protocol import Heartbeat, HeartbeatReply, NodeIn, Registered
from xpupool.server.services import node_identity
from xpupool.server.store_off_loop import on_store

router = APIRouter(prefix="/v1/agent", tags=["agent"])


@router.post("/register", response_model=Registered)
def register(body: NodeIn, plane: Plane, who: Agent, request: Request) -> Registered:
    """Register or update a node; the same body twice changes nothing. With a bootstrap token
    the reply carries the node's own token, once."""
    request.state.audit_target = f"node {body.name}"
    return node_identity.register(plane, who, body)


@router.post("/heartbeat", response_model=HeartbeatReply)
def heartbeat(body: Heartbeat, plane: Plane, who: Agent, request: Request) -> HeartbeatReply:
    request.state.audit_target = f"node {body.node}"
    return node_identity.heartbeat(plane, who, body)


@router.post("/nodes/{node}/jobs/{job_id}/replicas/{replica}/logs", status_code=204)
async def append_log(
    node: Annotated[str, Path(max_length=63)],
    job_id: Annotated[int, Path(ge=1, le=1 << 62)],
    replica: Annotated[int, Path(ge=0, le=10_000)],
    request: Request,
    plane: Plane,
    who: Agent,
    offset: Annotated[int | None, Query(ge=0, le=1 << 62)] = None,
    attempt: Annotated[int | None, Query(ge=1, le=1 << 31)] = None,
) -> None:
    """Append raw bytes (the body) to a replica's log. ``offset``: where the body starts in the
    output of run ``attempt``; bytes the server has already are skipped (a resend after an
    agent's restart adds nothing). Without it (an older agent) the body is appended as it is."""
    chunk = await request.body()
    # it waits for the plane's lock: on PostgreSQL on a thread (store_off_loop.py, issue 50)
    await on_store(
        plane, node_identity.append_log, plane, who, node, job_id, replica, chunk, offset, attempt
    )
