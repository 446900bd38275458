"""One writer per store (issue 43, item 6): the owner row, its lease, and the fence on every commit.

The data dir's lock (``agent/launch/dirlock.py``) keeps two servers off one directory, but
``--db`` lets a second server open a live pool's database from another directory (or, with
PostgreSQL, another host); both then ran the same job and fought over the rows. So the rule lives
in the store: one row (``storage/owner.py``) names the server that may write, with a lease and an
epoch.

- **Claim** at start, before anything is written: taken if there is no row, if it was released
  (clean stop), if its lease ended more than :data:`CLOCK_SKEW_S` ago, or if it names this host
  and this data dir while this process holds the data dir's lock (the kernel drops that lock when
  its holder dies, so the old owner is gone: a restart after a crash does not wait out the lease).
  Otherwise the start is refused with one line naming the owner and when its lease ends. Taking
  the row raises the epoch by one, compare-and-set, so two claimants never both win.
- **Renew** every ``lease_s * RENEW_FRACTION`` seconds of monotonic time (:class:`LeaseRenewer`),
  so a wall-clock step never delays or hurries a renewal; the row stores the expiry as the
  owner's wall-clock time, which another process can compare with its own. A lease that ends
  unrenewed is given up on this process's own clock (``LeaseRenewer.watch``), without waiting
  for a database that may be silent behind a partition.
- **Fence**: every transaction that wrote something checks, just before its ``COMMIT`` and inside
  it, that the row still carries this server's epoch (:meth:`StoreOwnership.fence`, on the
  commit of each engine the server writes through: one place, whatever opened the
  transaction). On SQLite the transaction holds the write lock by then, so no take-over can slip in
  between the check and the commit; elsewhere the check reads the row ``FOR SHARE``, which makes a
  take-over wait for the commit (or the check see it). A server that lost the row rolls back and
  raises :class:`StoreFenced` (503), now and for every later write: paused past its lease and
  taken over, it wakes up and writes nothing.
- **Release** at a clean stop (``lease_until`` 0): the next server takes the store at once.

Clocks: safety never depends on them; only the epoch decides who writes. The lease times only
decide when a take-over is allowed: a server whose clock runs behind the claimant's by more than
:data:`CLOCK_SKEW_S`, or which is paused past its lease, may lose the store while alive, and then
stops writing (503) instead of corrupting it. This is the mechanism a standby plane takes over
through (``server/standby.py``): it calls :meth:`StoreOwnership.claim` until it succeeds.
"""

from __future__ import annotations

import functools
import logging
import os
import socket
import threading
import time
import weakref
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Dialect, Engine, insert, literal, select, update
from sqlalchemy.engine import make_url
from sqlalchemy.exc import IntegrityError, OperationalError

from xpupool.model.errors import Unavailable, XpupoolError
from xpupool.server.storage import meta
from xpupool.server.storage.owner import store_owner

log = logging.getLogger("xpupool.server")

DEFAULT_STORE_LEASE_S = 10.0  # with renewals every 2 s: a standby takes over within ~15 s
RENEW_FRACTION = 0.2  # of the lease between two renewals: four may fail before it ends
CLOCK_SKEW_S = 2.0  # an ended lease is taken only this much later: clocks of two hosts differ


class StoreInUseError(XpupoolError):
    """Another live server owns the store; the message is the one line ``up`` prints."""


class StoreFenced(Unavailable):
    """This server no longer owns the store (taken over, or released at its stop): the write was
    rolled back, and every later one will be."""


@dataclass(frozen=True, slots=True)
class Identity:
    """Who claims the store; only named in refusals (host, pid, data dir)."""

    host: str
    pid: int
    data_dir: str

    @classmethod
    def here(cls, data_dir: Path) -> Identity:
        return cls(socket.gethostname(), os.getpid(), str(data_dir))


@dataclass(frozen=True, slots=True)
class Owner:
    """The owner row as read."""

    epoch: int
    host: str
    pid: int
    data_dir: str
    lease_until: float  # the owner's wall clock, Unix s; 0 = released

    def named(self) -> str:
        return f"host {self.host}, pid {self.pid}, data dir {self.data_dir}, epoch {self.epoch}"


def _owner(row: Any) -> Owner:
    return Owner(int(row[0]), str(row[1]), int(row[2]), str(row[3]), float(row[4]))


_COLUMNS = (
    store_owner.c.epoch,
    store_owner.c.host,
    store_owner.c.pid,
    store_owner.c.data_dir,
    store_owner.c.lease_until,
)


@functools.lru_cache(maxsize=8)
def _fence_sql(dialect: Dialect) -> str:
    """The fence's one statement for ``dialect``, compiled once: the owner row by its primary
    key, ``FOR SHARE`` where the database has row locks (SQLite's compiler leaves it out: its
    writer already holds the database's write lock)."""
    query = select(*_COLUMNS).where(store_owner.c.id == literal(1)).with_for_update(read=True)
    return str(query.compile(dialect=dialect, compile_kwargs={"literal_binds": True}))


class StoreOwnership:
    """This server's claim on the store at ``url``: :meth:`claim` once, :meth:`fence` each engine
    it writes through, renew (:class:`LeaseRenewer`), :meth:`release` at a clean stop.
    ``clock`` is wall-clock Unix time (stored for others to judge); the renewal cadence is not
    measured with it."""

    def __init__(
        self,
        url: str,
        identity: Identity,
        *,
        lease_s: float = DEFAULT_STORE_LEASE_S,
        skew_s: float = CLOCK_SKEW_S,
        clock: Callable[[], float] = time.time,
        dir_locked: bool = False,
    ) -> None:
        if not lease_s > 0:
            raise XpupoolError(f"--store-lease must be above 0 s, not {lease_s}")
        self.url = url
        self.identity = identity
        self.lease_s = lease_s
        self.skew_s = skew_s
        self.clock = clock
        # this process holds ``identity.data_dir``'s lock: an owner row naming that data dir on
        # this host belongs to a process that is gone
        self.dir_locked = dir_locked
        self.db: Engine | None = None  # its own, made by claim: claim, renewals, release
        self._renewer: LeaseRenewer | None = None
        self.epoch: int | None = None  # set by claim
        self.lost: str | None = None  # why this server may write no more; None while it may
        self.on_lost: list[Callable[[str], None]] = []  # told once, with the reason
        self._lost_guard = threading.Lock()
        self._fenced: weakref.WeakSet[Dialect] = weakref.WeakSet()  # dialects checked (fence)

    @property
    def made_schema(self) -> bool:
        """Whether this owner's engine is open, having made the store's schema: the plane's
        engines then skip that work (``meta.connect(schema=False)``), most of a second on
        PostgreSQL, once per engine, on the way to serving after a take-over."""
        return self.db is not None

    # ------------------------------------------------------------------ claim
    def claim(self) -> None:
        """Take the store, or raise :class:`StoreInUseError` (one line) and write nothing.
        Once taken, the lease is
        renewed from a thread of its own (:class:`LeaseRenewer`) until :meth:`release`: a start
        that takes longer than the lease (a big pool's first engine) keeps the store.
        Claiming a store this object holds does nothing: a standby (``server/standby.py``) has
        claimed it before the start claims it again."""
        if self.epoch is not None and self.lost is None:
            return
        started = time.monotonic()  # the lease runs from before the row is read, at the latest
        now = self.clock()
        if self.db is None:
            self.db = meta.connect(self.url)
        try:
            with self.db.begin() as conn:
                # the write lock first (SQLite) / the row's lock (others): read, decide, write
                # with nobody else in between
                conn.execute(update(store_owner).where(store_owner.c.id == 1).values(id=1))
                row = conn.execute(select(*_COLUMNS).where(store_owner.c.id == 1)).first()
                seen = None if row is None else _owner(row)
                if seen is not None:
                    why = self._free(seen, now)
                    if why is None:
                        raise StoreInUseError(self._refusal(seen, now))
                    log.warning("store taken over from %s: %s", seen.named(), why)
                epoch = 1 if seen is None else seen.epoch + 1
                values = {
                    "epoch": epoch,
                    "host": self.identity.host,
                    "pid": self.identity.pid,
                    "data_dir": self.identity.data_dir,
                    "taken_at": now,
                    "renewed_at": now,
                    "lease_until": now + self.lease_s,
                }
                if seen is None:
                    conn.execute(insert(store_owner).values(id=1, **values))
                else:
                    done = conn.execute(
                        update(store_owner)
                        .where(store_owner.c.id == 1, store_owner.c.epoch == seen.epoch)
                        .values(values)
                    )
                    if done.rowcount != 1:  # pragma: no cover - the lock above rules it out
                        raise StoreInUseError("the store was taken by another server meanwhile")
        except IntegrityError:  # two first claims at once (no row to lock): the other won
            raise StoreInUseError("the store was taken by another server meanwhile") from None
        self.epoch = epoch
        self.fence(self.db)
        self._renewer = LeaseRenewer(self, valid_until=started + self.lease_s)
        self._renewer.start()

    def _free(self, owner: Owner, now: float) -> str | None:
        """Why ``owner``'s row may be taken now, or None while it is live."""
        if owner.lease_until == 0:
            return "released at its clean stop"
        if self.dir_locked and (owner.host, owner.data_dir) == (
            self.identity.host,
            self.identity.data_dir,
        ):
            return "its data dir's lock is free: its process is gone"
        if now > owner.lease_until + self.skew_s:
            return f"its lease ended {now - owner.lease_until:.1f} s ago"
        return None

    def _refusal(self, owner: Owner, now: float) -> str:
        ends = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(owner.lease_until))
        url = make_url(self.url).render_as_string(hide_password=True)
        return (
            f"the store {url} is owned by another xpupool up ({owner.named()}); its lease "
            f"ends at {ends} (in {max(0.0, owner.lease_until - now):.0f} s, taken over "
            f"{self.skew_s:g} s after that) unless it renews it, as it does while it runs: "
            "stop that server first, or give this one its own --db"
        )

    # ------------------------------------------------------------------ fence
    def fence(self, engine: Engine) -> None:
        """Check this server's epoch before every commit on ``engine`` (see the module).

        The check wraps the engine's own dialect's ``do_commit`` (each engine has its dialect),
        the one call every commit of every connection goes through. A SQLAlchemy ``commit``
        event listener would do the same, but any engine event sends every statement down
        SQLAlchemy's slower path with events, a cost on every transaction, read or write, where
        this costs one SELECT per writing transaction (``bench/store_fence.py``; the figures are
        in docs/benchmarks.md)."""
        dialect = engine.dialect
        if dialect in self._fenced:
            return
        sql = _fence_sql(dialect)
        commit = dialect.do_commit

        def do_commit(driver: Any) -> None:
            self._check_commit(driver, sql)
            commit(driver)

        dialect.do_commit = do_commit  # type: ignore[method-assign,assignment]
        self._fenced.add(dialect)

    def _check_commit(self, driver: Any, sql: str) -> None:
        """The fence, on the DB-API connection about to commit: a transaction that wrote nothing
        passes (sqlite3 says whether one is open; other drivers are always checked); one that
        wrote is rolled back and refused unless the owner row carries ``epoch``."""
        if not getattr(driver, "in_transaction", True):
            return
        if self.lost is None:
            cursor = driver.cursor()
            try:
                cursor.execute(sql)
                row = cursor.fetchone()
            finally:
                cursor.close()
            if row is not None and int(row[0]) == self.epoch:
                return
            self.lose(
                "the store's owner row is gone"
                if row is None
                else f"this server lost the store to another xpupool up ({_owner(row).named()})"
            )
        driver.rollback()
        assert self.lost is not None
        raise StoreFenced(self.lost)

    def lose(self, why: str) -> None:
        """Give the store up for good (``why`` says how it was lost): every later commit is
        refused, and ``on_lost`` is told once."""
        with self._lost_guard:
            if self.lost is not None:
                return
            self.lost = (
                f"{why}: its lease was not renewed in time (paused, or cut off from the store); "
                "it writes nothing more: stop it"
            )
        log.error("%s", self.lost)
        for tell in self.on_lost:
            tell(self.lost)

    # ------------------------------------------------------------------ renew and release
    def renew(self) -> bool:
        """Extend the lease by ``lease_s`` from now; False once the store is lost (the fence
        raised). A store that fails (busy, unreachable) raises OperationalError: tried again at
        the next renewal, while the lease lasts."""
        if self.lost is not None or self.db is None:
            return False
        now = self.clock()
        try:
            with self.db.begin() as conn:
                conn.execute(
                    update(store_owner)
                    .where(store_owner.c.id == 1, store_owner.c.epoch == self.epoch)
                    .values(renewed_at=now, lease_until=now + self.lease_s)
                )
        except StoreFenced:
            return False
        return True

    def release(self) -> None:
        """At a clean stop: the store may be taken at once. This server writes nothing more."""
        if self._renewer is not None:
            self._renewer.stop()
            self._renewer = None
        if self.db is None:
            return
        if self.epoch is not None and self.lost is None:
            with suppress(StoreFenced, OperationalError), self.db.begin() as conn:
                conn.execute(
                    update(store_owner)
                    .where(store_owner.c.id == 1, store_owner.c.epoch == self.epoch)
                    .values(lease_until=0.0)
                )
            with self._lost_guard:
                self.lost = self.lost or "this server released the store at its stop"
        self.db.dispose()


class LeaseRenewer(threading.Thread):
    """Renews ``ownership`` every ``lease_s * RENEW_FRACTION`` s (``Event.wait`` times with the
    monotonic clock) until stopped or the store is lost; and watches the lease's end on a thread
    of its own (:meth:`watch`).

    ``valid_until``: monotonic time until which the lease holds, ``lease_s`` after the start of
    the last claim or renewal that committed. The row's ``lease_until`` was read from the wall
    clock after that start, so the lease ends here no later than a standby may take the store
    (``CLOCK_SKEW_S`` after the row's end, on a clock that agrees within that much)."""

    def __init__(self, ownership: StoreOwnership, *, valid_until: float) -> None:
        super().__init__(name="xpupool-store-lease", daemon=True)
        self.ownership = ownership
        self.valid_until = valid_until
        self.stopped = threading.Event()
        self._watch = threading.Thread(target=self.watch, name="xpupool-lease-watch", daemon=True)

    def start(self) -> None:
        super().start()
        self._watch.start()

    def run(self) -> None:
        period = self.ownership.lease_s * RENEW_FRACTION
        while not self.stopped.wait(period):
            started = time.monotonic()
            try:
                if not self.ownership.renew():
                    return
            except OperationalError as exc:
                log.warning("store lease not renewed (tried again in %.1f s): %s", period, exc.orig)
            else:
                self.valid_until = started + self.ownership.lease_s

    def watch(self) -> None:
        """Give the store up when the lease ends unrenewed, without asking the database: a plane
        cut off from it by a partition that drops packets waits on its statements for as long as
        TCP keeps the connection (minutes), and a renewal stuck among them tells nothing. Its
        writes then answer 503 and ``/healthz`` says why, before a standby may take over; the
        fence still refuses whatever commit reaches the database after that."""
        while not self.stopped.is_set():
            left = self.valid_until - time.monotonic()
            if left <= 0:
                self.ownership.lose(f"this server lost the store ({-left:.1f} s past its lease)")
                return
            self.stopped.wait(left)

    def stop(self) -> None:
        self.stopped.set()
        self.join(timeout=5)
        self._watch.join(timeout=5)
