"""``POST /v1/jobs/{id}/progress``: a running job's rate into the plane's measured speeds
(issue 55; ``server/throughput_knowledge.py`` says what is learned and how it is bounded)."""

from __future__ import annotations

from xpupool.server.auth import Principal
from xpupool.server.plane import ControlPlane
from xpupool.server.schemas.jobs import Progress, ProgressIn
from xpupool.server.services.jobs import owned_row


def progress(plane: ControlPlane, me: Principal, job_id: int, body: ProgressIn) -> Progress:
    """404 for a job ``me`` may not see, 409 unless it runs and has a kind, 422 naming
    ``replica`` for a replica it does not have."""
    with plane.db.connect() as conn:
        owned_row(conn, me, job_id)
    done = plane.report_progress(job_id, body.replica, body.rate)
    got = done.recorded
    if got is None:
        return Progress(job_id=job_id, kind=done.kind, model=None, rate=None, runs=0)
    return Progress(
        job_id=job_id,
        kind=done.kind,
        model=got.model,
        rate=got.figure.rate,
        runs=got.figure.runs,
    )
