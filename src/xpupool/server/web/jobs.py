"""Jobs: the list (a tenant's own, or everybody's for the admin), a job's page (request,
placement, events timeline, live log tail) and its cancel button.

Reads go through the same services as the API (``services/jobs.py``), so a tenant asking for
another tenant's job gets the API's 'not found'. The log tail is served as plain text from a byte
offset, and the page's script appends it as text, never as markup.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response

from xpupool.server.plane import ControlPlane
from xpupool.server.schemas.jobs import FINAL_STATES, JobPhase
from xpupool.server.services import jobs
from xpupool.server.web.forms import FormDep
from xpupool.server.web.render import HEADERS, page
from xpupool.server.web.sessions import check_csrf
from xpupool.server.web.viewer import PlaneDep, Viewer, ViewerDep

router = APIRouter(include_in_schema=False)
JobId = Annotated[int, Path(ge=1, le=1 << 62)]
PAGE_JOBS = 100
LOG_CHUNK = 64 << 10  # bytes of log per poll: the page catches up over a few polls


@router.get("/jobs", response_class=HTMLResponse)
def jobs_page(
    request: Request,
    plane: PlaneDep,
    viewer: ViewerDep,
    state: JobPhase | None = None,
) -> HTMLResponse:
    listed = jobs.list_jobs(plane, viewer.principal, state=state, limit=PAGE_JOBS)
    return page(
        request,
        viewer,
        "jobs.html",
        jobs=listed,
        state=state,
        states=list(JobPhase),
        limit=PAGE_JOBS,
    )


def _job_context(plane: ControlPlane, viewer: Viewer, job_id: int) -> dict[str, Any]:
    job = jobs.get(plane, viewer.principal, job_id)
    return {
        "job": job,
        "request_json": json.dumps(job.request, indent=2, sort_keys=True),
        "final": job.state in FINAL_STATES,
        "replicas": int(str(job.request.get("replicas", 1) or 1)),
    }


@router.get("/jobs/{job_id}", response_class=HTMLResponse)
def job_page(
    request: Request,
    job_id: JobId,
    plane: PlaneDep,
    viewer: ViewerDep,
    replica: Annotated[int, Query(ge=0, le=10_000)] = 0,
) -> HTMLResponse:
    return page(request, viewer, "job.html", replica=replica, **_job_context(plane, viewer, job_id))


@router.get("/ui/jobs/{job_id}", response_class=HTMLResponse)
def job_fragment(
    request: Request, job_id: JobId, plane: PlaneDep, viewer: ViewerDep
) -> HTMLResponse:
    return page(request, viewer, "job_live.html", **_job_context(plane, viewer, job_id))


@router.get("/ui/jobs/{job_id}/log", response_class=PlainTextResponse)
def job_log(
    job_id: JobId,
    plane: PlaneDep,
    viewer: ViewerDep,
    replica: Annotated[int, Query(ge=0, le=10_000)] = 0,
    offset: Annotated[int, Query(ge=0, le=1 << 50)] = 0,
) -> PlainTextResponse:
    """Up to :data:`LOG_CHUNK` bytes of the replica's log from ``offset``; ``X-Next-Offset`` is
    where the next poll starts (text is cut back to a whole UTF-8 character)."""
    skipped, chunk = jobs.logs(plane, viewer.principal, job_id, replica, offset)
    offset += skipped  # rotated away (log_rotation.py): the page goes on from what is kept
    chunk = chunk[:LOG_CHUNK]
    cut = len(chunk)
    while cut > 0 and cut > len(chunk) - 4:
        try:
            text = chunk[:cut].decode("utf-8")
            break
        except UnicodeDecodeError:
            cut -= 1
    else:
        text, cut = chunk.decode("utf-8", "replace"), len(chunk)
    return PlainTextResponse(
        text,
        headers={**HEADERS, "X-Next-Offset": str(offset + cut)},
        media_type="text/plain; charset=utf-8",
    )


@router.post("/jobs/{job_id}/cancel")
def cancel_job_form(
    request: Request, job_id: JobId, plane: PlaneDep, viewer: ViewerDep, form: FormDep
) -> Response:
    check_csrf(request, viewer.session, form.get("csrf"))
    jobs.cancel(plane, viewer.principal, job_id)
    return RedirectResponse(f"/jobs/{job_id}", status_code=303, headers=HEADERS)
