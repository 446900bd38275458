"""Jobs: submit, read, list, cancel, logs. A tenant sees only its own jobs; another tenant's job
is 'not found' (404), so ids leak nothing. Submission commits before it answers, so an
acknowledged job survives a crash; placement happens in the scheduling loop right after."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import Connection, func, select

from xpupool.catalog.image_needs import ImageMerge, merge_image_needs
from xpupool.catalog.image_ref import ImageRefError, parse_image_ref
from xpupool.catalog.throughput import job_kind
from xpupool.engine.outcomes import NeverFits, NotAdmitted, render
from xpupool.log_rotation import read_kept
from xpupool.model.errors import Conflict, NotFound, RequestError
from xpupool.model.qos import may_lower_priority
from xpupool.model.request import Request
from xpupool.model.request_model import request_from_dict
from xpupool.model.speeds import MAX_KIND_CHARS
from xpupool.model.stopping import format_duration
from xpupool.server import job_lifecycle as lc
from xpupool.server.auth import Principal
from xpupool.server.job_views import Submitted, job_view
from xpupool.server.plane import (
    ControlPlane,
    auto_recut,
    check_request_names,
    gang_request,
    secret_rows,
    submissions,
)
from xpupool.server.request_names import check_names
from xpupool.server.schemas.agent_protocol import DeviceAssignment, ReplicaAssignment
from xpupool.server.schemas.jobs import (
    FINAL_STATES,
    Checkpoint,
    Job,
    JobEvent,
    JobIn,
    JobPhase,
    StopCause,
)
from xpupool.server.services import grants, reservations, volumes
from xpupool.server.services.models import expand_model_job
from xpupool.server.storage.jobs import job_events as t_events
from xpupool.server.storage.jobs import jobs as t_jobs
from xpupool.server.storage.usage import usage_records as t_usage
from xpupool.server.usage.billing import Verdict

MAX_LIST = 1000


def submit(
    plane: ControlPlane,
    me: Principal,
    body: JobIn,
    *,
    then: Callable[[Connection, Submitted], None] | None = None,
) -> Job:
    """One submission: :func:`submit_many` of one, its refusal raised. ``then`` writes what
    belongs with the job in the same transaction (a Kubernetes site's row naming the pod the job
    stands for): if it fails, the job is not stored either."""
    (result,) = submit_many(plane, [(me, body)], then=then)
    if isinstance(result, Exception):
        raise result
    return result.view()


def submit_many(
    plane: ControlPlane,
    asks: Sequence[tuple[Principal, JobIn]],
    *,
    then: Callable[[Connection, Submitted], None] | None = None,
) -> list[Submitted | Exception]:
    """:func:`submit` for each of ``asks`` in one store transaction: what each would have
    answered alone, in order (a refused one its error, which changes nothing), each seeing those
    before it (a tenant's pending count). One commit for all is the point: a commit costs the
    store about as much as the rest of a submission's writes (issue 25). A write that fails
    aborts them all: the store rolls back, memory is put back to what it holds, and every
    submission of the batch that was not refused gets that failure."""
    out: list[Submitted | Exception | None] = [None] * len(asks)
    accepted: list[tuple[int, _Accepted]] = []
    for i, (me, body) in enumerate(asks):
        try:
            accepted.append((i, _accept(plane, me, body)))
        except Exception as exc:  # answered as submit() would raise it
            out[i] = exc

    def check(conn: Connection, one: _Accepted) -> submissions.Checked:
        req, waiting, budget = _check(plane, conn, one)
        return submissions.Checked(
            one.body, one.tenant, req, waiting, one.from_image.events, budget
        )

    submissions.submit(plane, accepted, check, then, out)  # checks and inserts, as one step
    answered = [o for o in out if o is not None]
    assert len(answered) == len(asks), "every submission has its answer"
    if any(isinstance(o, Submitted) for o in answered):
        plane.wake.set()
    return answered


def verdict(plane: ControlPlane, me: Principal, body: JobIn, *, complete: bool = True) -> str:
    """What :func:`submit` would answer ``body`` now, storing nothing: raises what would refuse
    it (the same checks, in the same order: one verdict, not a copy of it), else returns the
    reason it would wait with. ``complete`` False: a body still being written (the dashboard's
    form as you type), so what it runs is not asked about yet; the submission asks."""
    one = _accept(plane, me, body)

    def check() -> str:
        with plane.db.connect() as conn:
            return _check(plane, conn, one, complete=complete)[1]

    return plane.read(check)  # the checks, as a submission makes them: on one state


@dataclass(frozen=True, slots=True)
class _Accepted:
    """A submission's request as the body and the token make it, before the lock."""

    body: JobIn
    tenant: str
    req: Request
    from_image: ImageMerge


def _accept(plane: ControlPlane, me: Principal, body: JobIn) -> _Accepted:
    if me.is_admin:
        if body.tenant is None:
            raise RequestError(
                "tenant",
                None,
                "the admin must name the tenant to submit for (--tenant NAME), or submit with "
                "a tenant's token (export XPUPOOL_TOKEN=... from 'xpupool token issue NAME')",
            )
        tenant = body.tenant
    else:
        if body.tenant is not None and body.tenant != me.tenant:
            raise RequestError("tenant", body.tenant, "a tenant token submits only for itself")
        assert me.tenant is not None
        tenant = me.tenant
    from_model = body.model is not None
    served = body.model.name if body.model is not None else None
    if body.model is not None:
        body = expand_model_job(plane, body, tenant)
    req = Request() if body.request is None else body.request.to_request()
    queue = body.queue or (req.queue if req.queue != "default" else tenant)
    priority = body.priority if body.priority is not None else req.priority
    container = body.image is not None
    name = body.name or req.name  # empty: job-<id>, known under the lock
    req = replace(req, name=name, queue=queue, priority=priority, container=container)
    if req.grace_s is not None and req.grace_s > plane.max_grace_s:
        most = format_duration(plane.max_grace_s)
        raise RequestError(
            "grace", format_duration(req.grace_s), f"at most {most} on this server (up --max-grace)"
        ).under(body.request_field)
    kind = None if req.kind is not None else job_kind(None, body.image, served)
    if kind and not any(c.isspace() for c in kind):  # its job type (issue 55); a bad image is
        req = replace(req, kind=kind[:MAX_KIND_CHARS])  # refused on its own field, later
    # A model job's software needs come from the runtime catalog, not from its user: the
    # image's own needs then add to them (both hold) instead of giving way.
    from_image = merge_image_needs(req, body.image, plane.image_catalog, keep_given=not from_model)
    return _Accepted(body, tenant, from_image.request, from_image)


def _check(
    plane: ControlPlane, conn: Connection, one: _Accepted, *, complete: bool = True
) -> tuple[Request, str, Verdict]:
    """Under the plane's lock: the request as its queue and its tenant's budget complete it,
    the reason it waits with and the budget's word on it; raises what refuses it. Writes
    nothing. ``complete``: see :func:`verdict`."""
    body, tenant, req, from_image = one.body, one.tenant, one.req, one.from_image
    queue = req.queue
    spec = plane.queue_specs.get(queue)
    if spec is None or spec.tenant != tenant:
        raise RequestError("queue", queue, f"no queue of that name for tenant {tenant!r}")
    if req.node_policy is None and queue in plane.queue_profiles:
        # the queue's profile (known when the queue was stored; a restart may have lost it)
        req = replace(req, node_policy=plane.queue_profiles[queue])
        check_request_names(plane.engine, req, "queue")
    try:
        check_names(plane.engine, req)
    except RequestError as exc:
        raise exc.under(body.request_field) from None
    if req.data is not None:  # a dataset of the sites file (docs/sites.md, "Choosing a site")
        try:
            plane.site_network.dataset(req.data)
        except RequestError as exc:
            raise exc.under(body.request_field) from None
    if complete or body.image is not None:  # unfinished, it may not say what it runs yet
        _check_what_to_run(body)
    if req.container:  # first: its words tell the operator what to start
        _check_runtime_somewhere(plane, body.image)
    else:
        req = _agent_sites_only(plane, req)
    waiting = "waiting for the scheduler"
    miss = plane.verdicts.never_fits(gang_request(req))  # judged as the cycle will place it
    if (
        miss is not None
        and miss.field == "devices.partition"
        and auto_recut.could_serve(plane, req)
    ):
        miss = None  # no instance of its profile now, but a re-cut can make one (issue 53)
    if miss is not None:
        if not spec.allow_unfittable:
            why = f"nothing in the pool can hold it, even empty: {miss.reason}"
            if miss.field == "image":  # the runtime: a property of the job, not its request
                raise RequestError("image", body.image, why)
            if from_image.changed and miss.field in _IMAGE_FIELDS:
                raise RequestError("image", body.image, f"{why} ({from_image.events[-1]})")
            raise RequestError(miss.field, None, why).under(body.request_field)
        waiting = render(NeverFits(miss.reason))
    never = plane.admission.inadmissible(req, queue)
    if never is not None:  # its queue's quotas can never admit it: only a quota change could
        causes = render(NotAdmitted(never.causes))
        raise RequestError("queue", queue, f"the queue can never hold it: {causes}")
    _check_secrets(conn, tenant, body)
    volumes.check_mounts(conn, tenant, queue, body.volumes)
    reservations.check_entry(conn, plane, tenant, body.reservation)
    grants.check_submission(
        plane,
        conn,
        tenant=tenant,
        queue=queue,
        priority=req.priority,
        priority_field=lambda: _priority_field(body),
        replicas=req.replicas,
    )
    budget = plane.billing.judge(plane, conn, tenant, req.priority)  # usage/billing.py
    if budget.priority != req.priority:
        if not may_lower_priority(req.qos):  # its class promises its priority: not lowered
            why = (
                f"its tenant's budget would lower its priority ({budget.note}); a guaranteed "
                "job's priority is never lowered"
            )
            raise RequestError("qos", req.qos.value, why)
        req = replace(req, priority=budget.priority)
    return req, waiting, budget


# Fields of a never-fits miss that the image's needs may have caused: named as "image" then.
_IMAGE_FIELDS = frozenset({"devices.software", "devices.vendors", "devices.models"})


def _check_secrets(conn: Connection, tenant: str, body: JobIn) -> None:
    """Every secret the job names is one of its tenant's (a job never names another tenant's:
    names are looked up in its own tenant's only)."""
    if body.pull_secret is not None and not secret_rows.names(conn, tenant, [body.pull_secret]):
        why = f"tenant {tenant!r} has no secret of that name (xpupool secret set NAME)"
        raise RequestError("pull_secret", body.pull_secret, why)
    if not body.secrets:
        return
    have = secret_rows.names(conn, tenant, [ref.name for ref in body.secrets])
    for i, ref in enumerate(body.secrets):
        if ref.name not in have:
            raise RequestError(
                f"secrets[{i}].name",
                ref.name,
                f"tenant {tenant!r} has no secret of that name (xpupool secret set NAME)",
            )


def _priority_field(body: JobIn) -> str:
    """Where the job's priority came from, for an error that names it."""
    if body.priority is not None:
        return "priority"
    return "spec" if body.request_field == "spec" else "request.priority"


def _check_what_to_run(body: JobIn) -> None:
    """A job runs a command, an image (its entry point, or the command inside it), or both;
    neither would start nothing and end 'exited with 0'."""
    if body.image is not None and not body.image.strip():
        raise RequestError(
            "image", body.image, "must not be empty; null runs the command on the host"
        )
    if body.image is not None:
        # The OCI reference grammar: a reference never starts with '-', so a runtime can never
        # read the image as one of its options (issue 43: '--privileged' as the image).
        try:
            parse_image_ref(body.image)
        except ImageRefError as exc:
            raise RequestError(
                "image", body.image, f"not an image reference: {exc.reason}"
            ) from None
    if not body.command and body.image is None:
        raise RequestError("command", body.command, "give a command to run, an image, or both")
    if body.pull is not None and body.image is None:
        raise RequestError("pull", body.pull, "only an image is pulled; this job has no image")
    if body.pull_secret is not None and body.image is None:
        why = "only an image is pulled; this job has no image"
        raise RequestError("pull_secret", body.pull_secret, why)
    if body.port and body.image is None:
        why = "a host process listens on the port the agent picks ($PORT): give port 0"
        raise RequestError("port", body.port, why)


def _check_runtime_somewhere(plane: ControlPlane, image: str | None) -> None:
    """An image job waits for a node with a container runtime; when no node has one it would wait
    forever, so it is refused now, with the reason. Call under the plane's lock. Asked of the
    engine's column (one vectorised test), not by walking every node on each submission."""
    state = plane.cluster_state
    if not (state.node_container & state.node_alive).any():
        raise RequestError(
            "image",
            image,
            "no node has a container runtime (docker or podman) to run it: start an agent with "
            "--runtime where 'docker info' or 'podman info' answers, or submit a command without "
            "an image",
        )


def _agent_sites_only(plane: ControlPlane, req: Request) -> Request:
    """A job without an image runs on agent sites only: the active sites' nodes (a Kubernetes
    site's: a kubelet runs a pod's image, never a host command) run images only. Naming one is
    refused naming the site; naming none, the request excludes them (stored so: the job's
    request says where it may not go)."""
    active = [site.name for site in plane.sites.active()]
    for name in active:
        if name in req.sites:
            raise RequestError(
                "image", None, f"site {name} runs container images only: give the job an image"
            )
    extra = tuple(n for n in active if n not in req.exclude_sites)
    return replace(req, exclude_sites=req.exclude_sites + extra) if extra else req


def _row(conn: Connection, me: Principal, job_id: int) -> Any:
    row = conn.execute(select(t_jobs).where(t_jobs.c.id == job_id)).mappings().first()
    if row is None or (not me.is_admin and row["tenant"] != me.tenant):
        raise NotFound("job", str(job_id))
    return row


def owned_row(conn: Connection, me: Principal, job_id: int) -> Any:
    """Job ``job_id``'s row when ``me`` may see it (its tenant's, or an admin); NotFound (404)
    otherwise, for a job of another tenant as for one that does not exist."""
    return _row(conn, me, job_id)


def get(plane: ControlPlane, me: Principal, job_id: int) -> Job:
    with plane.db.connect() as conn:
        row = _row(conn, me, job_id)
        events = conn.execute(
            select(t_events).where(t_events.c.job_id == job_id).order_by(t_events.c.id)
        ).mappings()
        job = view(plane, row)
        job.events = [JobEvent.model_validate(dict(e)) for e in events]
        joules = conn.execute(
            select(func.sum(t_usage.c.energy_j)).where(t_usage.c.job_id == job_id)
        ).scalar()
    held = plane.held_jobs.get(job_id)
    job.checkpoint_at = None if held is None else held.checkpoint_at
    job.energy_kwh = None if joules is None else round(float(joules) / 3.6e6, 6)
    return job


def list_jobs(
    plane: ControlPlane,
    me: Principal,
    *,
    state: JobPhase | None = None,
    queue: str | None = None,
    tenant: str | None = None,
    limit: int = 100,
) -> list[Job]:
    q = select(t_jobs).order_by(t_jobs.c.id.desc()).limit(min(limit, MAX_LIST))
    if not me.is_admin:
        q = q.where(t_jobs.c.tenant == me.tenant)
    elif tenant is not None:
        q = q.where(t_jobs.c.tenant == tenant)
    if state is not None:
        q = q.where(t_jobs.c.state == state.value)
    if queue is not None:
        q = q.where(t_jobs.c.queue == queue)
    with plane.db.connect() as conn:
        rows = conn.execute(q).mappings().all()
    return [view(plane, r) for r in rows]


def view(plane: ControlPlane, row: Any) -> Job:
    """The API form of a job row, with its live assignment when it holds devices."""

    def assigned() -> list[ReplicaAssignment]:
        held = plane.held_jobs.get(row["id"])
        if held is None:
            return []
        return [assignment(plane, a, held.ports.get(a.replica, ())) for a in held.allocations]

    return job_view(row, plane.read(assigned))


def assignment(plane: ControlPlane, alloc: Any, ports: Sequence[int] = ()) -> ReplicaAssignment:
    rec = plane.node(alloc.node)
    by_uuid = {d.uuid: d for d in rec.node.devices} if rec else {}
    devices = []
    for share in alloc.devices:
        d = by_uuid.get(share.uuid)
        devices.append(
            DeviceAssignment(
                uuid=share.uuid,
                index=d.index if d else -1,
                vendor=d.vendor if d else "",
                model=d.model if d else "",
                memory_mib=share.memory_mib,
                core_permille=share.core_permille,
                card_memory_mib=d.memory_mib if d else 0,
                partition=d.partition if d else None,
            )
        )
    return ReplicaAssignment(
        replica=alloc.replica,
        allocation_id=alloc.id,
        node=alloc.node,
        cpu_milli=alloc.cpu_milli,
        memory_mib=alloc.memory_mib,
        devices=devices,
        ports=list(ports),
    )


def cancel(plane: ControlPlane, me: Principal, job_id: int) -> Job:
    """Pending or placed-but-not-started jobs are cancelled at once; running ones are stopped by
    their agent first and cancelled when their processes are gone (their devices stay held).
    The stop is stored before the answer: a server that crashes meanwhile stops the job when it
    is back, and never runs it again."""
    with plane.db.connect() as conn:  # whose it is never changes; a final state stays final
        row = _row(conn, me, job_id)
    phase = JobPhase(row["state"])
    if phase in FINAL_STATES:
        raise Conflict(f"job {job_id} is already {phase.value}")
    plane.stop_job(job_id, lc.Stop(StopCause.CANCELLED, "cancelled by user"))
    return get(plane, me, job_id)


def checkpoint(plane: ControlPlane, me: Principal, job_id: int) -> Checkpoint:
    """The job (its owner's, or an admin's call) saved its state now: the preemption planner
    counts what it would lose from here (server/job_checkpoints.py). 409 unless it runs."""
    with plane.db.connect() as conn:
        _row(conn, me, job_id)
    at = plane.checkpoint(job_id)
    if at is None:
        raise Conflict(f"job {job_id} is not running")
    return Checkpoint(job_id=job_id, at=at)


def logs(
    plane: ControlPlane, me: Principal, job_id: int, replica: int, offset: int
) -> tuple[int, bytes]:
    """Up to 4 MiB of the replica's log from byte ``offset``, as stored, and how many bytes
    before them were skipped because the log no longer holds them (rotated away:
    ``xpupool/log_rotation.py``); the next offset is ``offset`` plus both. An offset past the
    end is a RequestError: no answer of this endpoint leads there."""
    with plane.db.connect() as conn:
        row = _row(conn, me, job_id)
    req = request_from_dict(row["request"])
    replicas = req.replicas
    path = plane.log_path(job_id, replica)
    grown = req.max_replicas is not None and path.exists()  # an elastic job's replica it grew
    if replica >= replicas and not grown:
        raise RequestError(
            "replica", replica, f"job {job_id} has {replicas} replica(s), numbered from 0"
        )
    size = path.stat().st_size if path.exists() else 0
    if offset > size:
        raise RequestError("offset", offset, f"past the end of the log ({size} bytes so far)")
    if offset == size:
        return 0, b""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return read_kept(fd, offset, 4 << 20)
    finally:
        os.close(fd)
