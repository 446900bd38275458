"""/v1/services: jobs kept running as replicas behind one endpoint (docs/services.md)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Request

from xpupool.server.routers.deps import Plane, User
from xpupool.server.schemas.base import NAME_PATTERN, ErrorBody
from xpupool.server.schemas.services import Service, ServiceIn
from xpupool.server.services import services

router = APIRouter(prefix="/v1/services", tags=["services"])
NameParam = Annotated[str, Path(pattern=NAME_PATTERN, max_length=63)]
TenantParam = Annotated[
    str | None, Query(pattern=NAME_PATTERN, max_length=63, description="Admin only: whose.")
]


@router.post("", status_code=201, response_model=Service)
def create(body: ServiceIn, plane: Plane, me: User, request: Request) -> Service:
    """Create a service; its controller starts its replicas right after."""
    request.state.audit_target = f"service {body.name}"
    return services.create(plane, me, body)


@router.get("", response_model=list[Service])
def list_services(plane: Plane, me: User, tenant: TenantParam = None) -> list[Service]:
    """The caller's services (every tenant's for the admin), by tenant and name."""
    return services.list_services(plane, me, tenant)


@router.get("/{name}", response_model=Service)
def get_service(name: NameParam, plane: Plane, me: User, tenant: TenantParam = None) -> Service:
    return services.get(plane, me, name, tenant)


@router.put("/{name}", response_model=Service)
def update(name: NameParam, body: ServiceIn, plane: Plane, me: User, request: Request) -> Service:
    """Change a service: a change of its job or port rolls its replicas, one at a time."""
    request.state.audit_target = f"service {name}"
    return services.update(plane, me, name, body)


@router.post(
    "/{name}/stop",
    response_model=Service,
    responses={409: {"description": "The service is stopped already", "model": ErrorBody}},
)
def stop(
    name: NameParam, plane: Plane, me: User, request: Request, tenant: TenantParam = None
) -> Service:
    """Stop a service: its replicas are drained and end, none is started (not after a restart
    of the server either) and its endpoint answers 503 until it is started; 409 when it is
    stopped already."""
    request.state.audit_target = f"service {name}"
    return services.stop(plane, me, name, tenant)


@router.post(
    "/{name}/start",
    response_model=Service,
    responses={409: {"description": "The service is not stopped", "model": ErrorBody}},
)
def start(
    name: NameParam, plane: Plane, me: User, request: Request, tenant: TenantParam = None
) -> Service:
    """Start a stopped service: its controller starts its minimum of replicas; 409 when it is
    not stopped."""
    request.state.audit_target = f"service {name}"
    return services.start(plane, me, name, tenant)


@router.delete("/{name}", status_code=204)
def delete(
    name: NameParam, plane: Plane, me: User, request: Request, tenant: TenantParam = None
) -> None:
    """Delete a service and stop its replicas."""
    request.state.audit_target = f"service {name}"
    services.delete(plane, me, name, tenant)
