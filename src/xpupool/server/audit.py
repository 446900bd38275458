"""The audit log's writer and reader: who (token, role, tenant, node, source), what, when, result.

Written for every admin action, every agent registration and bootstrap exchange, and every
refused agent request (``server/audit_http.py`` for HTTP, the in-process agent's transport for its
own calls). Successful heartbeats are counted per node in memory (``heartbeats``, exported as
``xpupool_agent_heartbeats_total``), not written: at one per node every few seconds they would
bury everything else.

Each row has a kind (``storage/audit.kind_of``) and each kind its own bound (:class:`AuditKeep`):
a hostile agent credential refused in a loop (issue 43 item 8) once wrote a
row per call into one table of 100,000 and pushed the admin's history out in minutes. Now its
refusals are aggregated: the first of a window (``window_s``, one per credential, source, action
and status) writes a row, the next ones add to its ``count`` in memory, written to that row at
most once per ``flush_s`` and by :meth:`AuditLog.flush` (the watch thread, a read of the log, the
server's stop); and the refused rows are pruned among themselves, never at the admin's expense.
A crash loses at most the counts of the last ``flush_s``.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext, suppress
from dataclasses import dataclass

from sqlalchemy import Connection, Engine, delete, insert, select, update

from xpupool.model.errors import Unavailable
from xpupool.server.auth import Principal
from xpupool.server.schemas.audit import AuditEntry, AuditKind
from xpupool.server.storage.audit import audit as t_audit
from xpupool.server.storage.audit import kind_of

DEFAULT_KEEP_ROWS = 100_000
DEFAULT_KEEP_REFUSED = 10_000
PRUNE_EVERY = 500
WINDOW_S = 60.0
FLUSH_S = 1.0
MAX_RUNS = 10_000  # refusal runs held in memory at most (a flood from many sources)
MAX_REMEMBERED_IGNORED = 10_000

KEY_COLUMNS = ("token_id", "role", "tenant", "node", "source", "action", "status")
Key = tuple[int | None, str, str | None, str | None, str | None, str, int]
"""A refusal run's key: the credential, the source, the action and the status."""


@dataclass(frozen=True, slots=True)
class AuditKeep:
    """Rows kept per kind (``xpupool up --audit-keep``, ``--audit-keep-refused``): the oldest
    rows of a kind beyond its number are deleted as rows of that kind are written."""

    admin: int = DEFAULT_KEEP_ROWS
    agent: int = DEFAULT_KEEP_ROWS
    refused: int = DEFAULT_KEEP_REFUSED

    def __post_init__(self) -> None:
        for kind in AuditKind:
            if self.of(kind) < 1:
                raise ValueError(f"audit rows kept of kind {kind.value}: at least 1")

    def of(self, kind: AuditKind) -> int:
        return int(getattr(self, kind.value))


@dataclass(slots=True)
class _Run:
    """One key's refusals since ``first_at``: ``count`` of them, ``written`` of which are in row
    ``row_id`` (None while its insert is under way); ``row``: the row as first inserted."""

    row: dict[str, object]
    first_at: float
    at: float
    target: str
    result: str
    count: int = 1
    written: int = 1
    written_at: float = 0.0
    row_id: int | None = None


@dataclass(frozen=True, slots=True)
class _Write:
    """What a run's row is to say, taken under the lock and written outside it; ``before``:
    the run's written count before (put back if the write fails)."""

    run: _Run
    row_id: int
    said: dict[str, object]
    before: int


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


class AuditLog:
    """One per plane. ``write`` opens the plane's store transaction (under its lock), so audit
    rows never race the plane's own writes for SQLite's single writer. The run state has its own
    lock, never held while the plane's is taken (a heartbeat records an ignored report under
    the plane's lock)."""

    def __init__(
        self,
        db: Engine,
        write: Callable[[], AbstractContextManager[Connection]],
        clock: Callable[[], float],
        keep: AuditKeep | None = None,
        window_s: float = WINDOW_S,
        flush_s: float = FLUSH_S,
    ) -> None:
        self.db = db
        self.write = write
        self.clock = clock
        self.keep = keep or AuditKeep()
        self.window_s = window_s
        self.flush_s = flush_s
        self.heartbeats: Counter[str] = Counter()  # node -> successful heartbeats since start
        self._ignored: set[tuple[str, int, int]] = set()  # (node, job, replica) recorded once
        self._inserted: Counter[AuditKind] = Counter()
        self._runs: dict[Key, _Run] = {}
        self._lock = threading.Lock()

    def record(
        self,
        who: Principal | None,
        action: str,
        target: str,
        status: int,
        result: str,
        conn: Connection | None = None,
        source: str | None = None,
    ) -> None:
        """Write one row, or count one more refusal into its run's row; inside ``conn``'s
        transaction when given (the row commits or rolls back with the change it describes),
        else in a transaction of its own. ``source``: the client's address, if known."""
        now = self.clock()
        role = "none" if who is None else who.role
        kind = kind_of(role, action, status)
        row: dict[str, object] = {
            "at": now,
            "first_at": now,
            "token_id": None if who is None else who.token_id,
            "role": role,
            "tenant": None if who is None else who.tenant,
            "node": None if who is None or who.node is None else _cut(who.node, 200),
            "action": _cut(action, 63),
            "target": _cut(target, 300),
            "status": status,
            "result": _cut(result, 500),
            "kind": kind.value,
            "count": 1,
            "source": None if source is None else _cut(source, 64),
        }
        if kind is not AuditKind.REFUSED:
            with self._transaction(conn) as c:
                self._insert(c, kind, row)
            return
        self._refused(row, conn)

    def _transaction(self, conn: Connection | None) -> AbstractContextManager[Connection]:
        return nullcontext(conn) if conn is not None else self.write()

    def _insert(self, conn: Connection, kind: AuditKind, row: dict[str, object]) -> int:
        """Insert ``row``; every so many rows of ``kind``, delete that kind's oldest beyond its
        keep (every tenth of the keep at most, so the table holds about a tenth more)."""
        result = conn.execute(insert(t_audit).values(**row))
        keep = self.keep.of(kind)
        with self._lock:
            self._inserted[kind] += 1
            due = self._inserted[kind] % max(1, min(PRUNE_EVERY, keep // 10)) == 0
        if due:
            newest_first = select(t_audit.c.id).where(t_audit.c.kind == kind.value)
            last_kept = conn.execute(
                newest_first.order_by(t_audit.c.id.desc()).offset(keep - 1).limit(1)
            ).scalar()
            if last_kept is not None:
                conn.execute(
                    delete(t_audit).where(t_audit.c.kind == kind.value, t_audit.c.id < last_kept)
                )
        return int(result.inserted_primary_key[0])  # type: ignore[index]

    # ------------------------------------------------------------------ refusals, aggregated
    def _refused(self, row: dict[str, object], conn: Connection | None) -> None:
        key: Key = tuple(row[name] for name in KEY_COLUMNS)  # type: ignore[assignment]
        now = float(row["at"])  # type: ignore[arg-type]
        target, result = str(row["target"]), str(row["result"])
        writes: list[_Write] = []
        new: _Run | None = None
        with self._lock:
            run = self._runs.get(key)
            if run is not None and now - run.first_at < self.window_s:
                run.count += 1
                run.at, run.target, run.result = now, target, result
                if run.row_id is None or now - run.written_at < self.flush_s:
                    return  # counted: written by the next write of its row or a flush
                writes.append(self._take(run))
            else:
                if run is not None:  # its window ended: its last counts, then a new run
                    writes += self._unwritten([run])
                if len(self._runs) >= MAX_RUNS:  # bounded memory: write out and forget all
                    writes += self._unwritten(list(self._runs.values()))
                    self._runs.clear()
                new = self._runs[key] = _Run(row, now, now, target, result, written_at=now)
        try:
            with self._transaction(conn) as c:
                self._write_runs(c, writes)
                row_id = None if new is None else self._insert(c, AuditKind.REFUSED, row)
        except BaseException:
            with self._lock:
                self._unwrite(writes)
                if new is not None and self._runs.get(key) is new:
                    del self._runs[key]  # the next refusal opens the run again
            raise
        if new is not None:
            with self._lock:
                new.row_id = row_id

    @staticmethod
    def _take(run: _Run) -> _Write:
        """Under the lock: what ``run``'s row is to say now; its counts are taken as written."""
        assert run.row_id is not None
        said = {"count": run.count, "at": run.at, "target": run.target, "result": run.result}
        write = _Write(run, run.row_id, said, run.written)
        run.written, run.written_at = run.count, run.at
        return write

    def _unwritten(self, runs: list[_Run]) -> list[_Write]:
        """Under the lock: the writes of those ``runs`` whose counts are not all written."""
        return [self._take(r) for r in runs if r.row_id is not None and r.count > r.written]

    @staticmethod
    def _unwrite(writes: list[_Write]) -> None:
        """Under the lock: ``writes`` failed; their counts are written by a later write."""
        for w in writes:
            w.run.written = min(w.run.written, w.before)

    def _write_runs(self, conn: Connection, writes: list[_Write]) -> None:
        """Write each run's count, last time, target and reason into its row; a row that is gone
        (pruned while its run went on, or rolled back) is inserted again with them."""
        for w in writes:
            done = conn.execute(
                update(t_audit)
                .where(
                    t_audit.c.id == w.row_id,
                    t_audit.c.kind == AuditKind.REFUSED.value,
                    t_audit.c.first_at == w.run.first_at,
                )
                .values(**w.said)
            ).rowcount
            if not done:
                row_id = self._insert(conn, AuditKind.REFUSED, {**w.run.row, **w.said})
                with self._lock:
                    w.run.row_id = row_id

    def flush(self) -> None:
        """Write every run's counts not yet written, then forget the runs whose window ended.
        Raises :class:`Unavailable` when the store cannot be written (the counts are written by
        a later flush)."""
        with self._lock:
            writes = self._unwritten(list(self._runs.values()))
        if writes:
            try:
                with self.write() as conn:
                    self._write_runs(conn, writes)
            except BaseException:
                with self._lock:
                    self._unwrite(writes)
                raise
        now = self.clock()
        with self._lock:
            ended = [
                k
                for k, r in self._runs.items()
                if now - r.first_at >= self.window_s and r.count == r.written
            ]
            for k in ended:
                del self._runs[k]

    # ------------------------------------------------------------------ counted, not written
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
        stopped the process writes one row, not one per heartbeat; an agent credential's are
        aggregated with its refusals (a hostile node can report any number of invented ones)."""
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

    def entries(
        self, since: float | None, limit: int, kind: AuditKind | None = None
    ) -> list[AuditEntry]:
        """The newest ``limit`` rows (of ``kind``; None = every kind) whose last occurrence is
        at or after ``since`` (Unix time; None = any), oldest first, with every refusal counted
        so far (the runs are flushed first, when the store takes writes)."""
        with suppress(Unavailable):
            self.flush()
        query = select(t_audit).order_by(t_audit.c.id.desc()).limit(limit)
        if since is not None:
            query = query.where(t_audit.c.at >= since)
        if kind is not None:
            query = query.where(t_audit.c.kind == kind.value)
        with self.db.connect() as conn:
            rows = conn.execute(query).mappings().all()
        return [AuditEntry.model_validate(dict(r)) for r in reversed(rows)]
