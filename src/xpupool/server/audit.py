"""The audit log's writer and reader: who (token, role, tenant, node), what, when, result.

Written for every admin action, every agent registration and bootstrap exchange, and every
refused agent request (``server/audit_http.py`` for HTTP, the in-process agent's transport for its
own calls). Successful heartbeats are counted per node in memory (``heartbeats``, exported as
``xpupool_agent_heartbeats_total``), not written: at one per node every few seconds they would
bury everything else. The table keeps the newest ``keep`` rows; older ones are deleted as new
rows arrive, so a flood of refused requests costs bounded disk, never an unbounded table.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from contextlib import AbstractContextManager

from sqlalchemy import Connection, Engine, delete, insert, select

from xpupool.server import schemas as s
from xpupool.server.auth import Principal
from xpupool.server.storage.audit import audit as t_audit

DEFAULT_KEEP_ROWS = 100_000
PRUNE_EVERY = 500
MAX_REMEMBERED_IGNORED = 10_000


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


class AuditLog:
    """One per plane. ``write`` opens the plane's store transaction (under its lock), so audit
    rows never race the plane's own writes for SQLite's single writer."""

    def __init__(
        self,
        db: Engine,
        write: Callable[[], AbstractContextManager[Connection]],
        clock: Callable[[], float],
        keep: int = DEFAULT_KEEP_ROWS,
    ) -> None:
        self.db = db
        self.write = write
        self.clock = clock
        self.keep = keep
        self.heartbeats: Counter[str] = Counter()  # node -> successful heartbeats since start
        self._ignored: set[tuple[str, int, int]] = set()  # (node, job, replica) recorded once
        self._inserted = 0
        self._lock = threading.Lock()

    def record(
        self,
        who: Principal | None,
        action: str,
        target: str,
        status: int,
        result: str,
        conn: Connection | None = None,
    ) -> None:
        """Write one row; inside ``conn``'s transaction when given (the row commits or rolls back
        with the change it describes), else in a transaction of its own."""
        row: dict[str, object] = {
            "at": self.clock(),
            "token_id": None if who is None else who.token_id,
            "role": "none" if who is None else who.role,
            "tenant": None if who is None else who.tenant,
            "node": None if who is None or who.node is None else _cut(who.node, 200),
            "action": _cut(action, 63),
            "target": _cut(target, 300),
            "status": status,
            "result": _cut(result, 500),
        }
        if conn is not None:
            self._insert(conn, row)
        else:
            with self.write() as own:
                self._insert(own, row)

    def _insert(self, conn: Connection, row: dict[str, object]) -> None:
        result = conn.execute(insert(t_audit).values(**row))
        with self._lock:
            self._inserted += 1
            due = self._inserted % PRUNE_EVERY == 0
        if due:
            newest = int(result.inserted_primary_key[0])  # type: ignore[index]
            conn.execute(delete(t_audit).where(t_audit.c.id <= newest - self.keep))

    def count_heartbeat(self, node: str) -> None:
        with self._lock:
            self.heartbeats[node] += 1

    def heartbeat_counts(self) -> dict[str, int]:
        with self._lock:
            return dict(self.heartbeats)

    def report_ignored(
        self, conn: Connection, who: Principal | None, node: str, job_id: int, replica: int
    ) -> None:
        """A replica report for a replica this node does not hold: applied to nothing, recorded
        once per (node, job, replica) so that an agent repeating a stale report until it has
        stopped the process writes one row, not one per heartbeat."""
        key = (node, job_id, replica)
        with self._lock:
            if key in self._ignored:
                return
            if len(self._ignored) >= MAX_REMEMBERED_IGNORED:
                self._ignored.clear()
            self._ignored.add(key)
        self.record(
            who,
            "report_ignored",
            f"node {node}, job {job_id} replica {replica}",
            200,
            f"job {job_id} replica {replica} is not assigned to node {node}: report ignored, "
            "the agent is told to stop it",
            conn,
        )

    def entries(self, since: float | None, limit: int) -> list[s.AuditEntry]:
        """The newest ``limit`` rows at or after ``since`` (Unix time; None = any), oldest
        first."""
        query = select(t_audit).order_by(t_audit.c.id.desc()).limit(limit)
        if since is not None:
            query = query.where(t_audit.c.at >= since)
        with self.db.connect() as conn:
            rows = conn.execute(query).mappings().all()
        return [s.AuditEntry.model_validate(dict(r)) for r in reversed(rows)]
