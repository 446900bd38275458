"""Submissions stored, as the plane's operation: a batch of submissions checked against one state
of the books and the store (the queue, the engine's never-fits verdict, the quotas, the tenant's
secrets) and stored with them, each job's id, rows and place in its queue, in one transaction
under the plane's lock, so that no registration, placement or other submission lands between a
check and the insert it allows. ``services/jobs.py`` keeps what is the caller's (the body as the
token makes it, the checks and their errors) and calls :func:`submit`; nothing outside the
package takes the lock (``lock.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, TypeVar

from sqlalchemy import Connection

from xpupool.model.errors import Unavailable
from xpupool.model.request import Request
from xpupool.model.request_model import request_to_dict
from xpupool.server import job_lifecycle as lc
from xpupool.server.job_views import Submitted
from xpupool.server.plane.records import PendingJob
from xpupool.server.plane.store import gang_request
from xpupool.server.schemas.jobs import JobIn
from xpupool.server.storage.driver_insert import insert_rows
from xpupool.server.storage.jobs import job_events as t_events
from xpupool.server.storage.jobs import jobs as t_jobs

if TYPE_CHECKING:
    from xpupool.server.plane.control import ControlPlane
    from xpupool.server.usage.billing import Verdict

__all__ = ["Checked", "submit"]

A = TypeVar("A")


@dataclass(frozen=True, slots=True)
class Checked:
    """A submission its checks let in: its body, its tenant, the request as its queue completes
    it, the reason it waits with, the events its image's needs add to its first one, and its
    tenant's budget's word on it (``usage/billing.py``)."""

    body: JobIn
    tenant: str
    req: Request
    waiting: str
    image_events: tuple[str, ...]
    budget: Verdict


def submit(
    plane: ControlPlane,
    asks: Sequence[tuple[int, A]],
    check: Callable[[Connection, A], Checked],
    then: Callable[[Connection, Submitted], None] | None,
    out: list[Submitted | Exception | None],
) -> None:
    """Check and store each of ``asks`` ((its index in ``out``, the submission)) in one store
    transaction under the plane's lock, each seeing those before it, and put each answer in
    ``out``: what ``check`` raises refuses that one alone and writes nothing; ``then`` writes
    what belongs with a stored job in the same transaction. A write that fails aborts them all:
    the store rolls back, memory is put back to what it holds, and every submission of the batch
    that was not refused gets that failure."""
    try:
        if asks:
            with plane.write() as conn:
                for i, one in asks:
                    try:
                        checked = check(conn, one)
                    except Exception as exc:  # checks write nothing
                        out[i] = exc
                        continue
                    stored = out[i] = _store(plane, conn, checked)
                    if then is not None:
                        then(conn, stored)
    except Exception as exc:  # the batch's transaction rolled back
        if not isinstance(exc, Unavailable):  # a failed store put memory back already
            plane.reload()
        for i, _ in asks:
            if not isinstance(out[i], Exception):
                out[i] = exc


def _store(plane: ControlPlane, conn: Connection, one: Checked) -> Submitted:
    """Under the plane's lock, after its checks: the job's id, its rows, and its place in its
    queue."""
    body, req, waiting = one.body, one.req, one.waiting
    now = plane.clock()
    job_id = plane.take_job_id()
    name = body.name or f"job-{job_id}"
    if req.name != name:
        req = replace(req, name=name)
    submitted = lc.transition(None, lc.Submit())
    row = {
        "id": job_id,
        "name": name,
        "tenant": one.tenant,
        "queue": req.queue,
        "state": submitted.phase.value,
        "reason": waiting,
        "priority": req.priority,
        "request": request_to_dict(req),
        "command": body.command,
        "image": body.image,
        "pull": body.pull,
        "pull_secret": body.pull_secret,
        "port": body.port,
        "env": body.env,
        "secrets": [ref.model_dump() for ref in body.secrets] or None,
        "volumes": [m.model_dump() for m in body.volumes] or None,
        "on_node_lost": body.on_node_lost,
        "on_site_lost": body.on_site_lost,
        "flavor": None,
        "exit_code": None,
        "attempts": 0,
        "retries": 0,
        "max_retries": body.max_retries,
        "retry_on": None if body.retry_on is None else [c.value for c in body.retry_on],
        "backoff_s": body.retry_backoff_s,
        "backoff_max_s": body.retry_backoff_max_s,
        "max_runtime_s": body.max_runtime_s,
        "reservation": body.reservation,
        "preemptible": body.preemptible,
        "created_at": now,
        "updated_at": now,
    }
    insert_rows(conn, t_jobs, [row])
    event = {"job_id": job_id, "at": now, "state": submitted.phase.value}
    reasons = (submitted.reason, *one.image_events)
    budget = one.budget
    if budget.note is not None and budget.policy is not None:  # over its budget: said, counted
        reasons = (*reasons, budget.note)
        plane.billing.count(one.tenant, budget.policy)
    insert_rows(conn, t_events, [{**event, "reason": text} for text in reasons])
    pending = PendingJob(job_id, one.tenant, req.queue, req.priority, gang_request(req), now)
    pending.max_runtime_s = body.max_runtime_s
    pending.reservation, pending.preemptible = body.reservation, body.preemptible
    plane.queue_job(pending)
    return Submitted(row, reasons)
