"""The server's copies of the replicas' logs: where they are, and how much of a tenant's output
the server keeps, so that no tenant's output can stop the control plane (issue 43, item 5).

A replica's log is ``DIR/<job>/<replica>.log``, ``DIR`` being ``DATA/logs`` or, with ``xpupool up
--logs ROOT``, ``ROOT/logs`` (a filesystem of its own). A replica's log keeps its last
``--log-cap`` bytes: past it, the oldest are dropped (``xpupool/log_rotation.py``: why every job's
log rotates, and how offsets keep their meaning), so a long-running service stays logged; where
the filesystem cannot drop them, the cap cuts the log as the next two do. Two caps cut a log for
good, each with one marker line: the tenant's ``max_job_log_mib`` per job (its replicas
together) and ``max_log_mib`` for all its jobs, counted in the bytes the logs keep. The third
limit is the disk's: a write that would take its free space under the reserve (``--log-reserve``,
``xpupool/disk_reserve.py``) is dropped instead, with a line saying from where and, once
there is room again, how much was dropped. So job output never takes the room the store (on the
same disk by default) needs to commit, and a disk freed by retention or by hand is used again at
once. A log write that fails (the disk full all the same, read-only) drops the bytes the same way
and is said once in the server's log: it never marks the store unhealthy nor refuses a request,
because a 503 to an agent's upload would be written to the audit table, on the very disk that is
full. What is kept is counted per job and per tenant in memory (files read once at start, each
file's size again whenever it is written); a tenant at its limit is counted again from its files
at most every ``RECOUNT_S``, so logs removed by hand give the room back too.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from xpupool.disk_reserve import (
    free_bytes,
    held_back_marker,
    kept_again_marker,
    reserve_on,
    room_above,
    size_text,
)
from xpupool.log_rotation import first_kept, keep_last

log = logging.getLogger("xpupool.server")

CUT_PREFIX = b"\n[xpupool: log cut"
RECOUNT_S = 10.0  # a tenant at its limit is counted again from its files at most this often


@dataclass(frozen=True, slots=True)
class LogCaps:
    """What one tenant's logs may take on the server, bytes (``TenantIn.max_job_log_mib``,
    ``max_log_mib``)."""

    job_bytes: int
    tenant_bytes: int


def log_cut_marker(limit_bytes: int) -> bytes:
    """The line that ends a replica log the server cut (``xpupool up --log-cap``)."""
    mib = limit_bytes / (1 << 20)
    return f"\n[xpupool: log cut at {mib:g} MiB; the server keeps no more of it]\n".encode()


def gap_marker(n_bytes: int, *, after_line: bool) -> bytes:
    """The line where output the agent never sent is missing (its own copy rotated them away
    before they were sent); ``after_line``: the log ends a line already."""
    line = f"[xpupool: {size_text(n_bytes)} of output missing here (rotated away on the node)]\n"
    return (line if after_line else "\n" + line).encode()


def job_cut_marker(tenant: str, limit_bytes: int) -> bytes:
    return (
        f"{CUT_PREFIX.decode()}: the server keeps at most {size_text(limit_bytes)} of the logs"
        f" of one job of tenant {tenant!r} (max_job_log_mib)]\n"
    ).encode()


def tenant_cut_marker(tenant: str, limit_bytes: int) -> bytes:
    return (
        f"{CUT_PREFIX.decode()}: tenant {tenant!r} has {size_text(limit_bytes)} of job logs on"
        " the server, as much as it may keep until finished jobs are forgotten (max_log_mib)]\n"
    ).encode()


class JobLogs:
    """Thread-safe. ``replica_cap_bytes``: ``--log-cap``; ``reserve_bytes``: ``--log-reserve``
    as asked (the disk's quarter at most, see ``disk_reserve.reserve_on``). ``on_forget``:
    called with a job id whose logs are removed (the in-process agent drops its copies)."""

    def __init__(self, directory: Path, replica_cap_bytes: int, reserve_bytes: int) -> None:
        self.dir = directory
        self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.replica_cap_bytes = replica_cap_bytes
        self.reserve_bytes = reserve_on(self.dir, reserve_bytes)
        self.on_forget: list[Callable[[int], None]] = []
        self._lock = threading.Lock()
        self._sizes: dict[tuple[int, int], int] = {}  # (job, replica) -> bytes as last seen
        self._job_tenant: dict[int, str] = {}
        self._job_bytes: dict[int, int] = {}
        self._tenant_bytes: dict[str, int] = {}
        self._recounted: dict[str, float] = {}  # tenant -> monotonic time of its last recount
        self._cut: set[tuple[int, int]] = set()  # logs ended by a cap's marker line
        self._held: dict[tuple[int, int], int] = {}  # logs in a gap -> bytes dropped so far
        # (job, replica) -> end of the current run's output taken (kept or dropped), as the
        # agent counts it: what a resend skips (markers and gaps make the file's size differ)
        self._taken: dict[tuple[int, int], int] = {}
        self._dropping: str | None = None  # why log bytes are being dropped (said once)
        self._no_rotation = False  # the filesystem cannot punch holes: the replica cap cuts

    def path(self, job_id: int, replica: int) -> Path:
        return self.dir / str(job_id) / f"{replica}.log"

    # ------------------------------------------------------------------ counting
    def load(self, tenants: Mapping[int, str]) -> None:
        """Count what is on disk (at start): ``tenants`` maps job ids to their tenants (a log
        of a job no row names counts for nobody). A log that ends in a cap's marker stays cut."""
        with self._lock:
            for job_dir in self.dir.iterdir() if self.dir.is_dir() else ():
                if not job_dir.name.isdigit():
                    continue
                job_id = int(job_dir.name)
                for f in job_dir.glob("*.log"):
                    if not f.stem.isdigit():
                        continue
                    key = (job_id, int(f.stem))
                    size = _kept(f)
                    self._set_size(key, tenants.get(job_id, ""), size)
                    if size and CUT_PREFIX in _tail(f):
                        self._cut.add(key)

    def tenant_bytes(self, tenant: str) -> int:
        with self._lock:
            return self._tenant_bytes.get(tenant, 0)

    def _set_size(self, key: tuple[int, int], tenant: str, size: int) -> None:
        job_id = key[0]
        self._job_tenant.setdefault(job_id, tenant)
        delta = size - self._sizes.get(key, 0)
        self._sizes[key] = size
        self._job_bytes[job_id] = self._job_bytes.get(job_id, 0) + delta
        owner = self._job_tenant[job_id]
        self._tenant_bytes[owner] = self._tenant_bytes.get(owner, 0) + delta

    def _recount(self, tenant: str) -> None:
        """Read the sizes of ``tenant``'s logs again (some may have been removed by hand)."""
        now = time.monotonic()
        if now - self._recounted.get(tenant, -RECOUNT_S) < RECOUNT_S:
            return
        self._recounted[tenant] = now
        for key in [k for k in self._sizes if self._job_tenant.get(k[0]) == tenant]:
            self._set_size(key, tenant, _kept(self.path(*key)))

    def forget(self, job_id: int) -> None:
        """Remove job ``job_id``'s logs (retention) and what was counted for them."""
        shutil.rmtree(self.dir / str(job_id), ignore_errors=True)
        with self._lock:
            for key in [k for k in self._sizes if k[0] == job_id]:
                self._set_size(key, self._job_tenant.get(job_id, ""), 0)
                del self._sizes[key]
                self._cut.discard(key)
                self._held.pop(key, None)
                self._taken.pop(key, None)
            self._job_tenant.pop(job_id, None)
            self._job_bytes.pop(job_id, None)
        for hook in self.on_forget:
            hook(job_id)

    # ------------------------------------------------------------------ writing
    def start(self, job_id: int, replica: int, tenant: str, header: bytes) -> int:
        """Open a run's part of a replica's log: append ``header`` (an attempt line, or
        nothing) and return where the run's bytes start. Raises OSError as the disk does
        (a run handed out must not read an earlier run's bytes as its own)."""
        path = self.path(job_id, replica)
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with self._lock, path.open("ab") as f:
            if header:
                f.write(header)
            start = f.tell()
            f.flush()
            self._set_size((job_id, replica), tenant, _kept(path))
            self._held.pop((job_id, replica), None)
            self._taken.pop((job_id, replica), None)
        return start

    def taken(self, job_id: int, replica: int, run_start: int) -> int:
        """How much of the current run's output this log took already: as counted while this
        server runs, else (after a restart) the bytes after ``run_start``."""
        with self._lock:
            found = self._taken.get((job_id, replica))
        return found if found is not None else max(self.size(job_id, replica) - run_start, 0)

    def size(self, job_id: int, replica: int) -> int:
        return _size(self.path(job_id, replica))

    def append(
        self,
        job_id: int,
        replica: int,
        tenant: str,
        chunk: bytes,
        caps: LogCaps,
        taken: int | None = None,
        missing: int = 0,
    ) -> None:
        """Add ``chunk`` to the replica's log as far as the caps and the disk let it (see the
        module's docstring); never raises for the disk. ``taken``: where the chunk ends in the
        run's output (see :meth:`taken`); ``missing``: bytes of the run's output before the
        chunk that never came (the agent rotated them away first), said with a line."""
        key = (job_id, replica)
        path = self.path(job_id, replica)
        with self._lock:
            if taken is not None:
                self._taken[key] = max(taken, self._taken.get(key, 0))
            size = _kept(path)
            self._set_size(key, tenant, size)
            if key in self._cut or not chunk:
                return
            if missing:
                chunk = gap_marker(missing, after_line=_tail(path, 1) in (b"", b"\n")) + chunk
            rotating = not self._no_rotation
            if rotating and size + len(chunk) > self.replica_cap_bytes:
                rotating = self._rotate(path, self.replica_cap_bytes - len(chunk))
                size = _kept(path)
                self._set_size(key, tenant, size)
            if not rotating and size > self.replica_cap_bytes:
                return
            room, marker = self._room(key, tenant, size, caps, replica_cap=not rotating)
            kept = chunk[: max(room, 0)]
            cut = len(chunk) > room
            out = kept + marker if cut else kept
            if key in self._held:
                out = kept_again_marker(self._held[key]) + out
            if room_above(self.dir, self.reserve_bytes) < len(out) or not self._write(path, out):
                self._hold(key, path, len(chunk))
                return
            self._held.pop(key, None)
            if cut:
                self._cut.add(key)
            if rotating and _kept(path) > self.replica_cap_bytes:  # a chunk longer than it
                self._rotate(path, self.replica_cap_bytes)
            self._set_size(key, tenant, _kept(path))
            if self._dropping is not None:
                log.warning("job logs: kept again")
                self._dropping = None

    def _rotate(self, path: Path, keep_bytes: int) -> bool:
        """Drop the oldest bytes of ``path`` so that it keeps at most ``keep_bytes``; False when
        its filesystem cannot (the replica cap then cuts the log), said once."""
        if self._no_rotation:
            return False
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return True  # nothing to drop yet
        except OSError as exc:
            self._say("cannot be written", f"{exc.strerror or exc} ({path})")
            return True  # the write will fail the same way, and hold the bytes
        try:
            if keep_last(fd, max(keep_bytes, 0)) is None:
                self._no_rotation = True
                log.warning(
                    "job logs: %s cannot drop a log's oldest bytes (no hole punching): replica "
                    "logs stop at --log-cap instead of keeping their last bytes",
                    self.dir,
                )
                return False
        except OSError as exc:
            self._say("cannot be rotated", f"{exc.strerror or exc} ({path})")
        finally:
            os.close(fd)
        return True

    def _room(
        self, key: tuple[int, int], tenant: str, size: int, caps: LogCaps, *, replica_cap: bool
    ) -> tuple[int, bytes]:
        """Bytes the replica's log may still take, and the marker that ends it at that point;
        ``replica_cap``: the replica's cap cuts too (its log cannot rotate)."""
        owner = self._job_tenant.get(key[0], tenant)
        if self._tenant_bytes.get(owner, 0) >= caps.tenant_bytes:
            self._recount(owner)
        limits = (
            (
                self.replica_cap_bytes - size if replica_cap else caps.job_bytes,
                log_cut_marker(self.replica_cap_bytes),
            ),
            (
                caps.job_bytes - self._job_bytes.get(key[0], 0),
                job_cut_marker(owner, caps.job_bytes),
            ),
            (
                caps.tenant_bytes - self._tenant_bytes.get(owner, 0),
                tenant_cut_marker(owner, caps.tenant_bytes),
            ),
        )
        return min(limits, key=lambda lim: lim[0])

    def _write(self, path: Path, data: bytes) -> bool:
        try:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            with path.open("ab") as f:
                f.write(data)
        except OSError as exc:
            self._say("cannot be written", f"{exc.strerror or exc} ({path})")
            return False
        return True

    def _hold(self, key: tuple[int, int], path: Path, n_bytes: int) -> None:
        """Drop ``n_bytes``; the first drop of a gap writes the line that says so."""
        if key not in self._held:
            self._held[key] = 0
            self._say(
                "output dropped",
                f"{size_text(free_bytes(self.dir) or 0)} free on {self.dir}, the reserve is"
                f" {size_text(self.reserve_bytes)}",
            )
            self._write(path, held_back_marker(self.reserve_bytes))
        self._held[key] += n_bytes

    def _say(self, what: str, detail: str) -> None:
        """One line in the server's log when logs start being dropped for a new reason, not one
        per chunk."""
        if what != self._dropping:
            log.warning("job logs: %s: %s", what, detail)
        self._dropping = what


def _kept(path: Path) -> int:
    """Bytes the log holds: its length less what rotation dropped from its start."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return 0
    try:
        return os.fstat(fd).st_size - first_kept(fd)
    finally:
        os.close(fd)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _tail(path: Path, n_bytes: int = 512) -> bytes:
    try:
        with path.open("rb") as f:
            f.seek(max(_size(path) - n_bytes, 0))
            return f.read()
    except OSError:
        return b""
