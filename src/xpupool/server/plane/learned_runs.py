"""The run time the plane learns per request shape (``engine/site_choice.py``, ``RunTimes``):
recorded live from each job that succeeds, and read back from the jobs the store keeps when a
plane opens, so that a restarted plane's site choice (its wait estimate) and moves to faster cards
(a job without ``max_runtime``) weigh what the plane before it learned (issue 55).

Both count one run the same way: the succeeded run's end less its start. The end is the
``updated_at`` the move to ``succeeded`` writes (the same clock reading the live record takes, and
nothing writes a finished job's ``updated_at`` again) and the start is the run's ``started_at``
(kept by a success, cleared by a requeue), so the jobs table gives each run exactly and no table of
its own is needed. A job the retention deleted (``services/job_limits.py``) is not read back.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING

from sqlalchemy import Connection, Text, cast, select

from xpupool.model.errors import RequestError
from xpupool.model.request import Request
from xpupool.model.request_model import request_from_dict
from xpupool.server.plane import store
from xpupool.server.plane.records import HeldJob
from xpupool.server.schemas.jobs import JobPhase
from xpupool.server.storage.jobs import jobs as t_jobs

if TYPE_CHECKING:
    from xpupool.engine.site_choice import RunTimes

__all__ = ["RELEARN_JOBS", "learn_run", "relearn"]

RELEARN_JOBS = 10_000
"""The most succeeded jobs an opening plane reads its run times from, the newest: enough runs
for a steady mean of every shape a pool runs often, while the read (one query, each distinct
request decoded once) stays a bounded part of opening a plane on a store that kept every job,
however many that is (``bench/plane_open.py`` measures it)."""

_NAME = re.compile(r'\{"name": "(?:[^"\\]|\\.)*", ')
"""The name a stored request's JSON starts with (``request_to_dict`` writes it first)."""


def learn_run(conn: Connection, runtimes: RunTimes, job: HeldJob, now: float) -> None:
    """Held ``job`` succeeded at ``now`` (``conn``'s transaction stored it): ``runtimes`` learns
    its run under its stored request. The plane calls it only where something weighs the run
    (``ControlPlane._learn_run``), sparing the read of the request elsewhere."""
    if job.started_at is None:
        return
    request = request_from_dict(store.job_row(conn, job.id)["request"])
    runtimes.record(request, now - job.started_at)


def relearn(conn: Connection, runtimes: RunTimes, limit: int = RELEARN_JOBS) -> int:
    """``runtimes`` learns the runs of the newest ``limit`` jobs that succeeded (newest by id:
    the index on the state holds the id, so SQLite reads them without sorting every succeeded
    row), one query, in the order they ended, as the live plane recorded them. Returns the runs
    learned; a stored request that no longer decodes is skipped.

    Run whatever the plane's sites and moves: ``xpupool up --move-faster`` is turned on after
    the plane opens and a site's nodes may be listed after it, so neither is known here; with
    neither on nothing reads the means."""
    rows = conn.execute(
        select(t_jobs.c.id, cast(t_jobs.c.request, Text), t_jobs.c.started_at, t_jobs.c.updated_at)
        .where(t_jobs.c.state == JobPhase.SUCCEEDED.value, t_jobs.c.started_at.is_not(None))
        .order_by(t_jobs.c.id.desc())
        .limit(limit)
    ).all()
    shapes: dict[str, Request | None] = {}
    learned = 0
    for _, data, started_at, ended_at in sorted(rows, key=lambda r: (float(r[3]), r[0])):
        request = _decoded(str(data), shapes)
        if request is not None:
            runtimes.record(request, float(ended_at) - float(started_at))
            learned += 1
    return learned


def _decoded(text: str, seen: dict[str, Request | None]) -> Request | None:
    """The stored request ``text`` (its JSON as written), or None when it no longer decodes;
    decoded once per form but its name in ``seen``. Decoding is most of the read's cost and the
    jobs of a shape mostly differ in their names alone, which the written form puts first
    (``request_to_dict``): the form's key is the text without that name, and a text that does
    not start with one is its own key (decoded on its own: slower, and as correct)."""
    named = _NAME.match(text)
    form = text if named is None else "{" + text[named.end() :]
    if form in seen:
        return seen[form]
    try:
        request: Request | None = request_from_dict(json.loads(text))
    except (RequestError, KeyError, TypeError, ValueError):
        request = None
    seen[form] = request
    return request
