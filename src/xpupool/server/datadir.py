"""The data dir as a whole: whether ``xpupool up`` may open it, and the pool file kept beside the
database.

A data dir holds the database (``state.db``, unless ``--db``), ``pool`` (the pool's id and a mark
above every job id handed out), ``admin-token``, job logs (``logs/``) and the in-process agent's
files (``agent/``). They belong together. With ``--logs ROOT`` the last two are under ``ROOT``
instead (a filesystem of their own), with ``ROOT/pool-id`` naming the pool they belong to: a
``ROOT`` of another pool is refused, since its job ids (and logs) are another pool's. A database
that is missing or empty next to the rest of an earlier pool would start a new pool that hands
out job 1 again, and serves it job 1's old log, so a start refuses that unless told
``--reinitialise``, which moves the old files aside and starts job ids above the mark. A database
from another pool is refused. A data dir or database that cannot be written is refused before
anything else happens. Every refusal is one line (:class:`DataDirError`).
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import func, insert, select, update
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError

from xpupool.model.errors import XpupoolError
from xpupool.server.health import probe_writable, store_failure
from xpupool.server.ownership import StoreOwnership
from xpupool.server.storage import meta
from xpupool.server.storage.jobs import jobs as t_jobs
from xpupool.server.storage.pool import pool as t_pool
from xpupool.server.storage.tenants import tokens as t_tokens

POOL_FILE = "pool"
ID_BLOCK = 1000  # job ids reserved per write of the pool file: one small write per 1,000 jobs
LOGS_POOL_FILE = "pool-id"  # under --logs ROOT: the pool whose logs these are
LEFTOVERS = ("admin-token", POOL_FILE, "logs", "agent", LOGS_POOL_FILE)  # an earlier pool's
UNDER_LOGS_ROOT = ("logs", "agent", LOGS_POOL_FILE)  # of those, under --logs ROOT when given


class DataDirError(XpupoolError):
    """The data dir cannot be opened as it is; the message is the one line ``up`` prints."""


def write_private(path: Path, text: str, commit: Callable[[], None] | None = None) -> None:
    """Write ``path`` whole, mode 0600 from its first byte: a new file, synced, then renamed over
    the old one (a reader sees the old content or the new, never a mix or a wider mode).
    ``commit`` runs between the sync and the rename; if it raises, ``path`` is left as it was."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        if commit is not None:
            commit()
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@dataclass
class PoolFile:
    """``DATA/pool``: the pool's id, and ``job_ids_below``: every job id this data dir ever
    handed out is below it (raised a block at a time, before an id from the block is used)."""

    path: Path
    pool_id: str
    job_ids_below: int

    @classmethod
    def read(cls, data: Path) -> PoolFile | None:
        path = data / POOL_FILE
        try:
            found = json.loads(path.read_text())
            return cls(path, str(found["pool_id"]), int(found["job_ids_below"]))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise DataDirError(f"{path} cannot be read ({exc}); restore it or remove it") from None

    def write(self) -> None:
        body = {"pool_id": self.pool_id, "job_ids_below": self.job_ids_below}
        write_private(self.path, json.dumps(body) + "\n")

    def reserve(self, job_id: int) -> None:
        """Called before ``job_id`` is handed out; writes the file once per block."""
        if job_id >= self.job_ids_below:
            self.job_ids_below = job_id + ID_BLOCK
            self.write()


def check_writable(data: Path) -> None:
    """Refuse (one line) a data dir that cannot be created or written."""
    try:
        data.mkdir(mode=0o700, parents=True, exist_ok=True)
        probe_writable(data)
    except OSError as exc:
        raise DataDirError(
            f"data dir {data} cannot be written ({exc.strerror or exc}): "
            "give a writable --data, or free space on its filesystem"
        ) from None


def _leftover_paths(data: Path, logs_root: Path | None) -> list[Path]:
    root = logs_root or data
    return [(root if name in UNDER_LOGS_ROOT else data) / name for name in LEFTOVERS]


def leftovers(data: Path, logs_root: Path | None = None) -> list[str]:
    """What an earlier pool left in ``data`` (and ``logs_root``, ``--logs``): its admin token,
    pool file, logs, agent files (named in full where under ``logs_root``)."""
    found = []
    for path in _leftover_paths(data, logs_root):
        if path.is_file() or (path.is_dir() and any(path.iterdir())):
            name = path.name if path.parent == data else str(path)
            found.append(name + ("/" if path.is_dir() else ""))
    return found


def check_logs_root(logs_root: Path, pool_id: str) -> None:
    """Refuse a ``--logs`` root that holds another pool's logs; mark a new one as this pool's."""
    marker = logs_root / LOGS_POOL_FILE
    try:
        found = marker.read_text().strip()
    except FileNotFoundError:
        write_private(marker, pool_id + "\n")
        return
    if found != pool_id:
        raise DataDirError(
            f"{logs_root} holds the logs of pool {found}, and the database is pool {pool_id}'s:"
            " give each pool a --logs of its own"
        )


def open_pool(
    data: Path,
    url: str,
    *,
    reinitialise: bool,
    owner: StoreOwnership | None = None,
    logs_root: Path | None = None,
) -> PoolFile:
    """Check that ``data`` and the database at ``url`` are one pool and may start, and record
    the start in the database (proving it writable). A missing or empty database next to an
    earlier pool's files is refused unless ``reinitialise``; then those files are moved to
    ``DATA/old-<time>/`` and the new pool's job ids start above every earlier one.
    ``owner``: claimed here, after the checks that must see the database file as it was and
    before the first write (``server/ownership.py``). ``logs_root``: ``--logs``, where the logs
    and the in-process agent's files are instead of ``data``.
    Raises DataDirError (one line), or StoreInUseError while another server owns the store."""
    now = time.time()
    file = PoolFile.read(data)
    missing = _sqlite_missing(url)
    if missing and leftovers(data, logs_root) and not reinitialise:
        _refuse_new_pool(data, logs_root)  # before the database file is created
    try:
        if owner is not None:
            owner.claim()
        db = meta.connect(url, schema=owner is None or not owner.made_schema)
    except (OperationalError, OSError) as exc:
        raise DataDirError(f"the database cannot be opened: {store_failure(exc)}") from None
    if owner is not None:
        owner.fence(db)
    try:
        with db.begin() as conn:
            pool_id = conn.execute(select(t_pool.c.pool_id)).scalar()
            has_data = bool(conn.execute(select(func.count()).select_from(t_tokens)).scalar_one())
            top = conn.execute(select(func.max(t_jobs.c.id))).scalar()
            first = conn.execute(select(t_pool.c.first_job_id)).scalar()
            next_id = max(int(top or 0) + 1, int(first or 1))
            if pool_id is not None:
                if file is not None and file.pool_id != pool_id:
                    raise DataDirError(
                        f"the database belongs to pool {pool_id} but {file.path} to pool "
                        f"{file.pool_id}: --data and --db must be one pool's"
                    )
                if logs_root is not None:
                    check_logs_root(logs_root, pool_id)
                conn.execute(update(t_pool).values(opened_at=now))
                return file or _new_file(data, pool_id, next_id)
            first_job_id = 1
            if not has_data and leftovers(data, logs_root):
                if not reinitialise:
                    _refuse_new_pool(data, logs_root)
                first_job_id = _move_aside(data, file, now, logs_root)
                file = None
            pool_id = file.pool_id if file is not None else uuid.uuid4().hex
            if logs_root is not None:
                check_logs_root(logs_root, pool_id)
            conn.execute(
                insert(t_pool).values(
                    id=1, pool_id=pool_id, first_job_id=first_job_id, created_at=now, opened_at=now
                )
            )
            return _new_file(data, pool_id, max(first_job_id, next_id))
    except (OperationalError, OSError) as exc:
        raise DataDirError(f"the database cannot be written: {store_failure(exc)}") from None
    finally:
        db.dispose()


def _refuse_new_pool(data: Path, logs_root: Path | None) -> None:
    where = f"{data} holds" if logs_root is None else f"{data} and {logs_root} hold"
    raise DataDirError(
        f"the database is missing or empty but {where} an earlier pool's "
        f"{', '.join(leftovers(data, logs_root))}: a new pool would hand out its job ids (and "
        "logs) again. Restore the database, or start with --reinitialise to move those aside "
        "and begin a new pool"
    )


def _new_file(data: Path, pool_id: str, next_job_id: int) -> PoolFile:
    file = PoolFile(data / POOL_FILE, pool_id, next_job_id + ID_BLOCK)
    file.write()
    return file


def _move_aside(data: Path, file: PoolFile | None, now: float, logs_root: Path | None) -> int:
    """Move an earlier pool's files to ``old-<UTC time>/`` beside them (in ``data``, and in
    ``logs_root`` for what is there); returns the first job id the new pool may use: above the
    pool file's mark and every job id the old files are named by."""
    first = file.job_ids_below if file is not None else 1
    root = logs_root or data
    for where in (root / "logs", root / "agent"):
        if where.is_dir():
            for p in where.rglob("*"):
                head = p.name.split("-", 1)[0].split(".", 1)[0]
                if head.isdigit():
                    first = max(first, int(head) + 1)
    stamp = f"old-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime(now))}"
    for path in _leftover_paths(data, logs_root):
        if path.exists():
            aside = path.parent / stamp
            aside.mkdir(mode=0o700, exist_ok=True)
            path.rename(aside / path.name)
    return first


def _sqlite_missing(url: str) -> bool:
    """True for a SQLite URL whose file does not exist or is empty (left uncreated here)."""
    parsed = make_url(url)
    if not parsed.drivername.startswith("sqlite") or not parsed.database:
        return False
    path = Path(parsed.database)
    return not path.exists() or path.stat().st_size == 0
