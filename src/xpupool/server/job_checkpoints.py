"""A running job's last checkpoint, and what stopping it now would cost (issue 54 part 2).

A job reports a checkpoint through ``POST /v1/jobs/{id}/checkpoint`` or its checkpoint file; the
plane keeps the latest per job holding devices, in memory and in the job's row (``checkpoint_at``),
so that a restarted plane's planner still counts only what was run since it. A time before the
current run's start (an earlier attempt's, left in the row) counts as none. The scheduling
cycle asks :func:`stop_cost_of` for each running job when it plans a preemption
(``engine/cycle/stop_cost.py``): the victims that lose least go first, and none inside its
``min-run`` unless the preemptor's queue has ``preempts_min_run``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from sqlalchemy import Connection, update

from xpupool.engine.cycle.stop_cost import StopCost, stop_cost
from xpupool.model.stopping import MAX_GRACE_S, parse_duration
from xpupool.server.storage.jobs import jobs as t_jobs


class Run(Protocol):
    """What of a held job (``server/plane/records.py`` ``HeldJob``) this module reads and sets;
    a protocol, so that the plane can call in here without a circle of imports."""

    started_at: float | None
    checkpoint_at: float | None
    min_run_s: float | None


def stop_cost_of(held: Mapping[int, Run], now: float, job_id: int) -> StopCost:
    """What stopping held job ``job_id`` at ``now`` would lose (nothing when it holds nothing or
    has not started running). Called under the plane's lock, by the cycle."""
    job = held.get(job_id)
    if job is None:
        return StopCost(0.0)
    return stop_cost(now, job.started_at, job.checkpoint_at, job.min_run_s)


def record_checkpoint(conn: Connection, held: Mapping[int, Run], job_id: int, at: float) -> bool:
    """Job ``job_id`` saved its state at ``at`` (the plane's clock); kept, in memory and in its
    row (``conn``'s transaction), when it is running and ``at`` is later than what it has (an
    older report changes nothing, and writes nothing). Under the plane's lock; returns whether
    the job runs."""
    job = held.get(job_id)
    if job is None or job.started_at is None:
        return False
    # A report is of the current run (its file is in the run's own directory), but a job that
    # saves at once can date it before the plane heard of its start: it counts from the start.
    at = max(at, job.started_at)
    if job.checkpoint_at is None or at > job.checkpoint_at:
        job.checkpoint_at = at
        conn.execute(update(t_jobs).where(t_jobs.c.id == job_id).values(checkpoint_at=at))
    return True


def stopping_of(request: object) -> tuple[float | None, str | None]:
    """How the agent stops the job's replicas (``Work.grace_s``, ``Work.checkpoint_signal``),
    from its stored request (canonical, so valid); None: the agent's defaults."""
    stored = request if isinstance(request, dict) else {}
    grace, signal = stored.get("grace"), stored.get("checkpoint_signal")
    seconds = None if grace is None else parse_duration("grace", grace, MAX_GRACE_S)
    return seconds, None if signal is None else str(signal)
