"""/v1/volumes: directories on the nodes the admin lets tenants mount in their jobs."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request, Response

from xpupool.server.routers.deps import Admin, Plane, User
from xpupool.server.schemas.base import NAME_PATTERN
from xpupool.server.schemas.volumes import Volume, VolumeIn
from xpupool.server.services import volumes

router = APIRouter(prefix="/v1", tags=["volumes"])
NameParam = Annotated[str, Path(pattern=NAME_PATTERN, max_length=63)]


@router.put("/volumes/{name}", response_model=Volume)
def put_volume(
    name: NameParam, body: VolumeIn, plane: Plane, _: Admin, request: Request, response: Response
) -> Volume:
    """Declare or replace a volume (201 when new); jobs running with it keep their mount."""
    request.state.audit_target = f"volume {name}"
    volume, created = volumes.put_volume(plane, name, body)
    response.status_code = 201 if created else 200
    return volume


@router.get("/volumes", response_model=list[Volume])
def list_volumes(plane: Plane, me: User) -> list[Volume]:
    """Every volume for the admin; for a tenant, those it may mount."""
    return volumes.list_volumes(plane, me)


@router.delete("/volumes/{name}", status_code=204)
def delete_volume(name: NameParam, plane: Plane, _: Admin, request: Request) -> None:
    """Delete a volume's declaration (its directory stays on the nodes)."""
    request.state.audit_target = f"volume {name}"
    volumes.delete_volume(plane, name)
