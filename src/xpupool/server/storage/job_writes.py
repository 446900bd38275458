"""Job row updates, job events and allocation rows of one store transaction, written together.

A scheduling batch places up to 32 jobs in one transaction (``server/plane/scheduling_pass.py``), and
each placement wrote five statements: the job's row and an event for ``admitted``, its
allocations, the row and an event again for ``scheduled``. Through SQLAlchemy a statement costs
more CPU than SQLite takes to run it, so the writes were a large part of a pass (issue 25;
docs/benchmarks.md and its history).
:class:`JobWrites` keeps them until :meth:`JobWrites.flush`, then writes one statement per kind
with every row (``executemany`` on the driver's cursor, ``driver_insert.py``):

- the updates of one job are merged into one, the later value of a column winning, which leaves
  the row as the updates one after another would;
- events and allocation rows keep their order;
- the pool's allocation mark is raised above the allocation rows in the same transaction
  (``storage/pool.py``), so no id stored here is ever handed out again, even after a crash.

Nothing may read or write those rows in between: the transaction's other statements flush first
(``ControlPlane.apply`` does before any statement of its own), and the owner flushes before the
commit.
"""

from __future__ import annotations

import functools
from typing import Any

from sqlalchemy import Connection, Update, bindparam, update

from xpupool.server.storage.driver_insert import insert_rows, update_rows
from xpupool.server.storage.jobs import allocations as t_allocs
from xpupool.server.storage.jobs import job_events as t_events
from xpupool.server.storage.jobs import jobs as t_jobs
from xpupool.server.storage.pool import raise_allocation_mark


@functools.lru_cache(maxsize=64)
def job_update(columns: tuple[str, ...]) -> Update:
    """``UPDATE jobs SET columns... WHERE id = :b_id`` with bound values named ``b_<column>``,
    built once per columns (building one per call cost more CPU than running it)."""
    return (
        update(t_jobs)
        .where(t_jobs.c.id == bindparam("b_id"))
        .values({c: bindparam(f"b_{c}") for c in columns})
    )


def job_update_params(job_id: int, cols: dict[str, object]) -> dict[str, object]:
    """The bound values of :func:`job_update` for ``cols`` of job ``job_id``."""
    return {"b_id": job_id, **{f"b_{k}": v for k, v in cols.items()}}


class JobWrites:
    """The job writes of one transaction, kept until :meth:`flush`."""

    __slots__ = ("_allocations", "_events", "_updates")

    def __init__(self) -> None:
        self._updates: dict[int, dict[str, object]] = {}
        self._events: list[dict[str, Any]] = []
        self._allocations: list[dict[str, Any]] = []

    def __bool__(self) -> bool:
        return bool(self._updates or self._events or self._allocations)

    def update(self, job_id: int, cols: dict[str, object]) -> None:
        """Set ``cols`` of job ``job_id`` (merged into what is kept for it)."""
        kept = self._updates.get(job_id)
        if kept is None:
            self._updates[job_id] = dict(cols)
        else:
            kept.update(cols)

    def event(self, row: dict[str, Any]) -> None:
        """One ``job_events`` row."""
        self._events.append(row)

    def allocations(self, rows: list[dict[str, Any]]) -> None:
        """``allocations`` rows."""
        self._allocations.extend(rows)

    def flush(self, conn: Connection) -> None:
        """Write what is kept in ``conn``'s transaction, one statement per kind, and forget it."""
        if not self:
            return
        by_columns: dict[tuple[str, ...], list[dict[str, object]]] = {}
        for job_id, cols in self._updates.items():
            key = tuple(sorted(cols))
            by_columns.setdefault(key, []).append(job_update_params(job_id, cols))
        for key, params in by_columns.items():
            update_rows(conn, job_update(key), params)
        insert_rows(conn, t_events, self._events)
        insert_rows(conn, t_allocs, self._allocations)
        if self._allocations:
            raise_allocation_mark(conn, max(int(row["id"]) for row in self._allocations))
        self._updates, self._events, self._allocations = {}, [], []
