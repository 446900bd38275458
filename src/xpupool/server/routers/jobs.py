"""/v1/jobs."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import PlainTextResponse, Response

from xpupool.log_rotation import SKIPPED_HEADER
from xpupool.server.audit_http import submit_target
from xpupool.server.routers.deps import Plane, User, model_response
from xpupool.server.schemas.jobs import Checkpoint, Job, JobIn, JobPhase, Progress, ProgressIn
from xpupool.server.services import job_progress, jobs
from xpupool.server.store_off_loop import on_store

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])
JobId = Annotated[int, Path(ge=1, le=1 << 62)]


@router.post("", status_code=201, response_model=Job)
async def submit(body: JobIn, plane: Plane, me: User, request: Request) -> Response:
    """Submit a job. It is stored before the answer; the scheduler places it right after."""
    # On SQLite on the event loop, not in a thread: a submission is CPU under the plane's lock
    # (held by the scheduler for one batch of a few ms at most) and a commit that does not wait
    # for the disk (WAL, synchronous=NORMAL), and the hop to a thread and back was a large part
    # of what a submission cost the app (issue 25; docs/benchmarks.md and its history).
    # PostgreSQL is waited for on a thread (store_off_loop.py, issue 50).
    request.state.audit_target = submit_target(body.tenant or me.tenant)  # an admin's is audited
    job = await on_store(plane, jobs.submit, plane, me, body)
    request.state.audit_target = submit_target(job.tenant, job.id)
    return model_response(job, 201)


@router.get("", response_model=list[Job])
def list_jobs(
    plane: Plane,
    me: User,
    state: JobPhase | None = None,
    queue: Annotated[str | None, Query(max_length=63)] = None,
    tenant: Annotated[str | None, Query(max_length=63, description="Admin only")] = None,
    limit: Annotated[int, Query(ge=1, le=jobs.MAX_LIST)] = 100,
) -> list[Job]:
    """Newest first."""
    return jobs.list_jobs(plane, me, state=state, queue=queue, tenant=tenant, limit=limit)


@router.get("/{job_id}", response_model=Job)
def get_job(job_id: JobId, plane: Plane, me: User) -> Response:
    return model_response(jobs.get(plane, me, job_id))


@router.post("/{job_id}/cancel", response_model=Job)
def cancel(job_id: JobId, plane: Plane, me: User) -> Response:
    return model_response(jobs.cancel(plane, me, job_id))


@router.post("/{job_id}/checkpoint", response_model=Checkpoint)
def checkpoint(job_id: JobId, plane: Plane, me: User) -> Checkpoint:
    """The job saved its state now (its owner says so, e.g. from inside the job with its
    tenant's token): preemption prefers jobs that would lose least since their checkpoint."""
    return jobs.checkpoint(plane, me, job_id)


@router.post("/{job_id}/progress", response_model=Progress)
def progress(job_id: JobId, body: ProgressIn, plane: Plane, me: User) -> Progress:
    """A running replica's rate (its owner or an admin says so, e.g. from inside the job with
    its tenant's token): learned as the measured speed of the job's kind on its card model.
    409 when the job is not running or has no kind."""
    return job_progress.progress(plane, me, job_id, body)


@router.get("/{job_id}/logs", response_class=PlainTextResponse)
def logs(
    job_id: JobId,
    plane: Plane,
    me: User,
    replica: Annotated[int, Query(ge=0, le=10_000)] = 0,
    offset: Annotated[int, Query(ge=0, le=1 << 50)] = 0,
) -> PlainTextResponse:
    """Captured stdout and stderr of one replica, from byte ``offset`` (up to 4 MiB, as stored;
    past the end is 422). A log keeps its last ``--log-cap`` bytes: when ``offset`` was rotated
    away the answer starts at the oldest byte kept and ``X-Xpupool-Log-Skipped`` says how many
    bytes were skipped. The next offset is ``offset`` plus those and the bytes received."""
    skipped, data = jobs.logs(plane, me, job_id, replica, offset)
    return PlainTextResponse(data, headers={SKIPPED_HEADER: str(skipped)})
