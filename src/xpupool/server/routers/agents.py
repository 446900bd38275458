"""/v1/agent: registration, heartbeats (metrics and replica reports in, work out), log upload."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request

from xpupool.server import schemas as s
from xpupool.server.routers.deps import Agent, Plane
from xpupool.server.services import agents, fleet

router = APIRouter(prefix="/v1/agent", tags=["agent"])


@router.post("/register", response_model=s.Node)
def register(body: s.NodeIn, plane: Plane, _: Agent) -> s.Node:
    """Register or update a node; the same body twice changes nothing."""
    return fleet.register(plane, body)


@router.post("/heartbeat", response_model=s.HeartbeatReply)
def heartbeat(body: s.Heartbeat, plane: Plane, _: Agent) -> s.HeartbeatReply:
    return agents.heartbeat(plane, body)


@router.post("/nodes/{node}/jobs/{job_id}/replicas/{replica}/logs", status_code=204)
async def append_log(
    node: Annotated[str, Path(max_length=63)],
    job_id: Annotated[int, Path(ge=1, le=1 << 62)],
    replica: Annotated[int, Path(ge=0, le=10_000)],
    request: Request,
    plane: Plane,
    _: Agent,
) -> None:
    """Append raw bytes (the body) to a replica's log."""
    chunk = await request.body()
    agents.append_log(plane, node, job_id, replica, chunk)
