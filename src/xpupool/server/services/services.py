"""Services (``/v1/services``): create, read, list, change, stop, start, delete. The API's side;
the replicas are kept by ``server/service_controller.py``.

A service is checked, when created and when changed, by the one verdict a job submission gets
(``jobs.verdict``, errors named under ``job.``), so a service that could never start a replica is
refused then, not found failing later. A tenant sees only its own services; another tenant's is
'not found' (404), as its jobs are. A change of the job or the port is a new generation, which
the controller rolls out; a change of the bounds, the probe or the scaling is taken as it is.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import select

from xpupool.model.errors import NotFound, RequestError
from xpupool.server.auth import Principal
from xpupool.server.plane import service_rows
from xpupool.server.schemas.jobs import JobIn, JobPhase
from xpupool.server.schemas.services import (
    Service,
    ServiceEvent,
    ServiceIn,
    ServiceReplica,
    ServiceState,
)
from xpupool.server.services import jobs
from xpupool.server.services.models import SERVE_PORT_ENV, expand_model_job
from xpupool.server.services.replica_env import node_address
from xpupool.server.storage.jobs import jobs as t_jobs

if TYPE_CHECKING:
    from xpupool.server.plane.control import ControlPlane

PROXY_PATH = "/v1/services/{name}/proxy/"


def tenant_of(me: Principal, asked: str | None) -> str:
    """Whose service a request is about: a tenant's own; the admin names one (``tenant``)."""
    if me.is_admin:
        if asked is None:
            raise RequestError("tenant", None, "the admin must name the service's tenant")
        return asked
    if asked is not None and asked != me.tenant:
        raise RequestError("tenant", asked, "a tenant token acts only for itself")
    assert me.tenant is not None
    return me.tenant


def as_tenant(tenant: str) -> Principal:
    """The principal a service's replicas are submitted and stopped as: its tenant's."""
    return Principal(token_id=0, role="tenant", tenant=tenant)


def replica_job(spec: ServiceIn, name: str) -> JobIn:
    """The job one replica of ``spec`` runs, named ``name``: the service's job, which the
    service restarts itself (no retries of its own; a lost node ends it), listening on the
    service's port or on $PORT, reached at the node port its agent picks either way (so the
    plane probes only ports an agent handed out, never one a tenant named)."""
    port: int | None = 0 if spec.port is None else spec.port  # 0: on $PORT, the agent picks
    if spec.port is None and spec.job.model is not None:
        port = None  # the runtime's (services/models.py); stored services name it already
    update = {"name": name, "max_retries": 0, "retry_on": [], "on_node_lost": "fail", "port": port}
    return spec.job.model_copy(update=update)


def _check_runs(plane: ControlPlane, tenant: str, spec: ServiceIn) -> ServiceIn:
    """What a replica's submission would refuse, refused now (under ``job``); the spec to store:
    a catalog model's with the port its runtime listens on, when it names none."""
    try:
        jobs.verdict(plane, as_tenant(tenant), replica_job(spec, f"{spec.name}-0"))
        if spec.job.model is not None and spec.port is None:
            served = expand_model_job(plane, spec.job, tenant)
            spec = spec.model_copy(update={"port": int(served.env[SERVE_PORT_ENV])})
    except RequestError as exc:
        raise exc.under("job") from None
    return spec


def create(plane: ControlPlane, me: Principal, body: ServiceIn) -> Service:
    tenant = tenant_of(me, body.tenant)
    body = _check_runs(plane, tenant, body)
    now = plane.clock()
    values = {
        "tenant": tenant,
        "name": body.name,
        "spec": _stored(body),
        "generation": 1,
        "state": ServiceState.PENDING.value,
        "reason": "waiting for the controller to start its replicas",
        "desired": body.replicas.min,
        "started": 0,
        "created_at": now,
        "updated_at": now,
    }
    service_rows.create(plane, values, "created")
    plane.services_wake.set()
    return get(plane, me, body.name, tenant)


def _stored(body: ServiceIn) -> dict[str, Any]:
    spec = body.model_dump(mode="json", exclude_unset=True)
    spec["job"] = body.job.model_dump(mode="json", exclude_unset=True)
    spec.pop("tenant", None)
    return spec


def _row(plane: ControlPlane, me: Principal, name: str, tenant: str | None) -> dict[str, Any]:
    owner = me.tenant if not me.is_admin else tenant
    with plane.db.connect() as conn:
        row = None if owner is None else service_rows.get(conn, owner, name)
        if row is None and me.is_admin and tenant is None:  # the admin may leave it out
            found = [r for r in service_rows.listed(conn) if r["name"] == name]
            if len(found) > 1:
                owners = ", ".join(r["tenant"] for r in found)
                why = f"tenants {owners} each have a service {name!r}: name the tenant"
                raise RequestError("tenant", None, why)
            row = found[0] if found else None
    if row is None:
        raise NotFound("service", name)
    return row


def get(plane: ControlPlane, me: Principal, name: str, tenant: str | None = None) -> Service:
    row = _row(plane, me, name, tenant)
    with plane.db.connect() as conn:
        events = service_rows.events(conn, row["id"])
    service = view(plane, row)
    service.events = [ServiceEvent.model_validate(e) for e in events]
    return service


def list_services(plane: ControlPlane, me: Principal, tenant: str | None = None) -> list[Service]:
    """A tenant's own; every tenant's for the admin (or ``tenant``'s)."""
    with plane.db.connect() as conn:
        rows = service_rows.listed(conn, me.tenant if not me.is_admin else tenant)
    return [view(plane, r) for r in rows]


def update(plane: ControlPlane, me: Principal, name: str, body: ServiceIn) -> Service:
    """Replace the service's spec; a new generation when its job or port changed."""
    if body.name != name:
        raise RequestError("name", body.name, f"the service is {name!r}: a name is not changed")
    if not me.is_admin:
        tenant_of(me, body.tenant)  # a tenant names none but itself
    row = _row(plane, me, name, body.tenant)
    body = _check_runs(plane, row["tenant"], body)
    old = ServiceIn.model_validate(row["spec"])
    rolls = old.replica_spec() != body.replica_spec()
    generation = row["generation"] + (1 if rolls else 0)
    values = {"spec": _stored(body), "generation": generation, "updated_at": plane.clock()}
    why = f"changed: generation {generation}, rolling its replicas" if rolls else "changed"
    service_rows.change(plane, row["id"], values, [why])
    plane.services_wake.set()
    return get(plane, me, name, row["tenant"])


def delete(plane: ControlPlane, me: Principal, name: str, tenant: str | None = None) -> None:
    """Forget the service and stop its replicas (stored before the answer, as a cancel is)."""
    row = _row(plane, me, name, tenant)
    job_ids = service_rows.remove(plane, row["id"])
    service_rows.stop_jobs(plane, job_ids, f"service {name} deleted")
    plane.services_wake.set()


def stop(plane: ControlPlane, me: Principal, name: str, tenant: str | None = None) -> Service:
    """Stop the service: stored before the answer, its replicas drained and ended by the
    controller, none started until :func:`start`; 409 when stopped already."""
    row = _row(plane, me, name, tenant)
    service_rows.stop(plane, row["id"], name, plane.clock())
    plane.services_wake.set()
    return get(plane, me, name, row["tenant"])


def start(plane: ControlPlane, me: Principal, name: str, tenant: str | None = None) -> Service:
    """Start a stopped service again: its min replicas, started by the controller; 409 when it
    is not stopped."""
    row = _row(plane, me, name, tenant)
    spec = ServiceIn.model_validate({**row["spec"], "tenant": None})
    service_rows.start(plane, row["id"], name, spec.replicas.min, plane.clock())
    plane.services_wake.set()
    return get(plane, me, name, row["tenant"])


@dataclass(frozen=True, slots=True)
class ReplicaFacts:
    """What the plane knows of one replica's job: its state, how it ended, and where it is
    reached (``host``: its node's address, ``port``: the first port its agent reported)."""

    state: JobPhase
    reason: str
    exit_code: int | None
    node: str | None
    host: str | None
    port: int | None


def replica_facts(plane: ControlPlane, job_ids: Iterable[int]) -> dict[int, ReplicaFacts]:
    """:class:`ReplicaFacts` of each job of ``job_ids`` still stored."""
    ids = sorted(job_ids)
    if not ids:
        return {}
    cols = (t_jobs.c.id, t_jobs.c.state, t_jobs.c.reason, t_jobs.c.exit_code)
    with plane.db.connect() as conn:
        rows = conn.execute(select(*cols).where(t_jobs.c.id.in_(ids))).all()

    def where() -> dict[int, tuple[str | None, str | None, int | None]]:
        out: dict[int, tuple[str | None, str | None, int | None]] = {}
        for job_id in ids:
            held = plane.held_jobs.get(job_id)
            if held is None or not held.allocations:
                continue
            first = min(held.allocations, key=lambda a: a.replica)
            rec = plane.node(first.node)
            host = None if rec is None else node_address(first.node, rec.node.labels, rec.source)
            ports = held.ports.get(first.replica) or []
            out[job_id] = (first.node, host, ports[0] if ports else None)
        return out

    placed = plane.read(where)
    return {
        r.id: ReplicaFacts(JobPhase(r.state), r.reason, r.exit_code, *placed.get(r.id, (None,) * 3))
        for r in rows
    }


def view(plane: ControlPlane, row: dict[str, Any]) -> Service:
    """The API form of a service row: its replicas as the plane and its controller see them."""
    spec = ServiceIn.model_validate({**row["spec"], "tenant": None})
    with plane.db.connect() as conn:
        links = service_rows.replicas(conn, row["id"])
    facts = replica_facts(plane, [r.job_id for r in links])
    endpoints = plane.service_endpoints.ready(row["tenant"], row["name"])
    ready = {e.job_id for e in endpoints}  # replica jobs; a site's own replicas have none
    replicas = []
    for link in links:
        f = facts.get(link.job_id)
        if f is None:
            continue
        replicas.append(
            ServiceReplica(
                job_id=link.job_id,
                name=f"{row['name']}-{link.ordinal}",
                generation=link.generation,
                state=f.state,
                ready=link.job_id in ready,
                draining=bool(link.draining),
                node=f.node,
                host=f.host,
                port=f.port,
            )
        )
    rate, p99 = _rate(plane, row["tenant"], row["name"])
    return Service(
        name=row["name"],
        tenant=row["tenant"],
        state=ServiceState(row["state"]),
        reason=row["reason"],
        url=PROXY_PATH.format(name=row["name"]),
        generation=row["generation"],
        desired=row["desired"],
        ready=len(endpoints),
        min=spec.replicas.min,
        max=spec.replicas.upper,
        port=spec.port,
        requests_per_s=rate,
        p99_ms=p99,
        spec=row["spec"],
        replicas=replicas,
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


def _rate(plane: ControlPlane, tenant: str, name: str) -> tuple[float, float | None]:
    traffic = getattr(plane, "service_traffic", None)  # the proxy's counts, where it runs
    if traffic is None:
        return 0.0, None
    rate, p99 = traffic.rate(tenant, name)
    return float(rate), p99
