"""Metering: what each replica run held, for how long, and the energy of its cards (issue 52).

The plane tells the meter three things, under its own lock, each an append to a list
(:meth:`UsageMeter.replica_started` when a replica is first reported running,
:meth:`replica_ended` when its report is final, :meth:`job_released` when the job's devices are
given back for any reason: a lost node, a lease, a stop before a start). Everything else happens
in :meth:`flush`, on the watch thread every ``every_s``, outside the plane's lock, in one
transaction of its own: the events are applied in order, every open run is advanced to now, and
the records, the hourly and daily rollups and the all-time totals are written together. So a run
in progress is visible, a crash loses at most one interval, and the scheduling path pays a list
append per replica start or end.

Never counted twice: a record is keyed by (job, attempt, replica, card); a run adopted after a
restart is reported running again and continues its stored open record from where it was last
advanced (the plane was down, the run went on: the gap is counted); a retry or a preemption's
requeue is a new attempt, so a new record. At the first flush, stored records left open by runs
the plane no longer holds (they ended while it was down) are closed where they were last counted.

Energy: each card's power at the flush (its agent's reading, else the catalog model at its
reported utilisation: ``catalog/power.py``) times the time held, split among the card's holders
by their compute share; what the holders leave of a held card's energy over the interval (the
unheld share, the unheld part of the interval) is charged to tenant ``pool``. A run continued
after a restart is counted over the downtime, so its card's pool is too, from the same point at
the same watts, once (:meth:`UsageMeter._pool_energy`).

Foreign use: a Kubernetes site's pods the plane did not create are recorded as runs too
(:meth:`UsageMeter.foreign_started`, ``k8s/site/foreign.py``), under a job id of this process's
own, so the site's card-hours add up; a restarted plane closes them where last counted and opens
new ones as its site reads the pods again.

Cost: the rollups carry what their usage cost at the price table in force as it was used
(``price_history.py``); a stretch spanning a price change is split at it. The tables are read
again at the first flush after they change (:meth:`UsageMeter.pricing`).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from sqlalchemy import (
    Connection,
    Table,
    and_,
    bindparam,
    delete,
    select,
    update,
)

from xpupool.catalog.power import PowerModel
from xpupool.server.storage.driver_insert import insert_rows, update_rows
from xpupool.server.storage.usage import LABELS, SUMS, usage_records, usage_rollups, usage_totals
from xpupool.server.usage import idle_power
from xpupool.server.usage.buckets import STEPS, month_start, spread
from xpupool.server.usage.price_history import PriceSchedule, read_schedule

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from xpupool.model.allocation import Allocation
    from xpupool.model.device import Node
    from xpupool.server.schemas.agent_protocol import DeviceMetrics


T = TypeVar("T")


class HeldJob(Protocol):
    """What the meter reads of a held job (``server/plane/records.py``'s): the plane imports the
    meter, so the meter names no plane type."""

    id: int
    attempt: int
    tenant: str
    queue: str
    priority: int
    allocations: list[Allocation]
    started_at: float | None


class ControlPlane(Protocol):
    """What the meter reads of the plane (``server/plane/control.py``)."""

    db: Engine

    def clock(self) -> float: ...

    @property
    def held_jobs(self) -> Mapping[int, HeldJob]: ...

    def read(self, look: Callable[[], T]) -> T: ...

    def device_metrics(self, uuid: str) -> DeviceMetrics | None: ...

    def idle_power_readings(self) -> list[tuple[str, float]]: ...

    def use_power(self, power: PowerModel) -> None: ...


log = logging.getLogger("xpupool.server")

POOL = "pool"
"""The tenant the unheld remainder of a held card's energy is charged to."""
DEFAULT_KEEP_DAYS = 400.0
DEFAULT_EVERY_S = 60.0
"""How often the server flushes (``xpupool up --usage-interval``): a flush costs CPU per held card
(docs/benchmarks.md, metering), so a large pool pays for a short interval; a crash loses at most
one."""
SWEEP_EVERY_S = 3600.0

Key = tuple[int, int, int, str]  # job, attempt, replica, card uuid
Labels = tuple[str, str, str, str]  # tenant, queue, site, model


@dataclass(frozen=True, slots=True)
class Run:
    """One open record as the meter holds it; the sums are those counted up to ``advanced_at``."""

    key: Key
    tenant: str
    queue: str
    priority: int
    site: str
    node: str
    model: str
    share: float
    memory_gib: float
    units: float
    started_at: float
    advanced_at: float
    seconds: float = 0.0
    device_seconds: float = 0.0
    gib_seconds: float = 0.0
    cu_seconds: float = 0.0
    energy_j: float = 0.0
    stored: bool = False

    @property
    def labels(self) -> Labels:
        return (self.tenant, self.queue, self.site, self.model)


@dataclass(frozen=True, slots=True)
class _Start:
    at: float
    runs: tuple[Run, ...]


@dataclass(frozen=True, slots=True)
class _End:
    at: float
    job_id: int
    attempt: int
    replica: int | None  # None: every replica of the attempt (released)


Sums = list[float]  # in SUMS order (a rollup's: then its cost, ROLLUP_SUMS)
ROLLUP_SUMS = (*SUMS, "cost")


class UsageMeter:
    """Records replica runs (see the module docstring). ``keep_s``: records and rollups kept
    (``xpupool up --usage-retention``); ``every_s``: how often the server flushes
    (``--usage-interval``); ``power``: the one power model and compute units."""

    def __init__(
        self, keep_s: float = DEFAULT_KEEP_DAYS * 86400.0, every_s: float = DEFAULT_EVERY_S
    ) -> None:
        if not keep_s > 0:
            raise ValueError("usage retention must be above 0")
        self.keep_s = keep_s
        self.every_s = every_s
        self.power = PowerModel()
        self.idle = idle_power.IdlePower(self.power.catalog)  # idle watts learned per model
        self._idle_into: PowerModel | None = None  # the power model last given them
        # foreign use (Kubernetes pods the plane did not create): a job id of this process's
        # own, below every job's, so its records are never continued by another process's
        self.foreign_job = -(int(time.time() * 1000) % 2_000_000_000 + 1)
        self._foreign: dict[tuple[str, str], int] = {}  # holder -> its use's number
        self._foreign_next = 0
        self._events: list[_Start | _End] = []
        self._events_lock = threading.Lock()
        self._open: dict[Key, Run] = {}
        self._last: float | None = None  # the last flush's time
        self._swept: float | None = None
        self._reconciled = False
        self._totals: dict[Labels, Sums] | None = None  # seeded from the store on first use
        # stored open records of held runs that memory does not hold yet (runs adopted after a
        # restart): read once, at the first flush, and taken from as their runs report again
        self._adoptable: dict[Key, Run] = {}
        self._rollup_rows: set[tuple[str, float, Labels]] = set()  # rollup rows known stored
        self._rollup_buckets: set[tuple[str, float]] = set()  # buckets whose rows are known
        # card -> (from, to): what this process charged the card's pool for (_pool_energy)
        self._pool_spans: dict[str, tuple[float, float]] = {}
        self._flush_lock = threading.Lock()
        self._schedule: PriceSchedule | None = None  # the price tables; None: read at the flush
        self.flushes = 0  # flushes committed: what has been spent moves only then (billing.py)

    # ---- called by the plane, under its lock: appends only
    def replica_started(self, job: HeldJob, replica: int, node: Node | None, at: float) -> None:
        """Replica ``replica`` of ``job`` is reported running on ``node`` (as of ``at``). A run
        the job's row says began earlier (``started_at``: reported again after a restart) is
        recorded from then when no record of it was written before the plane stopped; a stored
        record is continued instead (:meth:`flush`)."""
        alloc = next((a for a in job.allocations if a.replica == replica), None)
        if alloc is None or node is None:
            return
        begun = at if job.started_at is None else min(at, job.started_at)
        who = (job.tenant, job.queue, job.priority)
        runs = self._runs((job.id, job.attempt, replica), who, node, alloc, begun)
        if runs:
            self._add(_Start(at, runs))

    def _runs(
        self,
        key: tuple[int, int, int],
        who: tuple[str, str, int],
        node: Node,
        alloc: Allocation,
        begun: float,
    ) -> tuple[Run, ...]:
        """The runs of ``alloc``'s cards: ``key`` (job, attempt, replica) and ``who`` (tenant,
        queue, priority) of each, begun at ``begun``."""
        models = {d.uuid: d.model for d in node.devices}
        units = self.power.compute_units  # cached per model name
        return tuple(
            Run(
                key=(*key, share.uuid),
                tenant=who[0],
                queue=who[1],
                priority=who[2],
                site=node.site,
                node=alloc.node,
                model=(model := models.get(share.uuid, "")),
                share=min(share.core_permille, 1000) / 1000.0,
                memory_gib=share.memory_mib / 1024.0,
                units=units(model),
                started_at=begun,
                advanced_at=begun,
            )
            for share in alloc.devices
        )

    def foreign_started(
        self,
        holder: tuple[str, str],
        who: tuple[str, str, int],
        node: Node,
        allocations: Iterable[Allocation],
        at: float,
    ) -> None:
        """``holder`` (site, ``pod NAMESPACE/NAME``), no job of the plane's, holds
        ``allocations`` on ``node`` from ``at`` on, for ``who`` (tenant, queue, priority); what
        it held before ends. Its records are keyed apart from every job's: job
        :attr:`foreign_job` (negative), attempt a number per holder's use in this process."""
        self.foreign_ended(holder, at)
        number = self._foreign_next
        self._foreign_next += 1
        self._foreign[holder] = number
        runs = tuple(
            run
            for i, alloc in enumerate(allocations)
            for run in self._runs((self.foreign_job, number, i), who, node, alloc, at)
        )
        if runs:
            self._add(_Start(at, runs))

    def foreign_ended(self, holder: tuple[str, str], at: float) -> None:
        number = self._foreign.pop(holder, None)
        if number is not None:
            self._add(_End(at, self.foreign_job, number, None))

    def replica_ended(self, job_id: int, attempt: int, replica: int, at: float) -> None:
        self._add(_End(at, job_id, attempt, replica))

    def job_released(self, job_id: int, attempt: int, at: float) -> None:
        self._add(_End(at, job_id, attempt, None))

    def _add(self, event: _Start | _End) -> None:
        with self._events_lock:
            self._events.append(event)

    @contextmanager
    def pricing(self) -> Iterator[None]:
        """Hold flushes off while the price tables change (``services/billing.py``): a flush
        then either ended before the change's time was read, or starts after it and prices by
        the tables as changed (read again at its start)."""
        with self._flush_lock:
            try:
                yield
            finally:
                self._schedule = None

    # ---- the watch thread
    def flush(self, plane: ControlPlane, now: float | None = None) -> int:
        """Apply the events, advance every open run to ``now`` and write it all in one
        transaction; returns the records written. On a failed write nothing in memory moves
        (the events are kept for the next flush) and the error is raised."""
        with self._flush_lock:
            now = plane.clock() if now is None else now
            with self._events_lock:
                events, self._events = self._events, []
            try:
                return self._flush(plane, events, now)
            except BaseException:
                with self._events_lock:
                    self._events[:0] = events
                raise

    def _flush(self, plane: ControlPlane, events: list[_Start | _End], now: float) -> int:
        open_runs = dict(self._open)
        changed: dict[Key, Run] = {}
        rollup: dict[tuple[str, float, Labels], Sums] = {}
        totals: dict[Labels, Sums] = {}
        closed: dict[Key, float] = {}
        spans: dict[tuple[Labels, float, float], Sums] = {}
        # The plane's lock is taken before this flush's transaction writes, never after: a
        # scheduling pass holds the lock and may wait for the store's write lock
        # (tests/unit/server/test_usage_lock_order.py).
        readings = plane.idle_power_readings()
        if not self._reconciled:
            self._reconcile(plane)
        with plane.db.begin() as conn:
            if self._totals is None:
                self._totals = _read_totals(conn)
            if self._schedule is None:
                self._schedule = read_schedule(conn, self.power.catalog)
            schedule = self._schedule
            learned, handed = self._learn_idle(conn, readings, now)
            adoptable = self._adoptable
            stored = _named(events, adoptable)
            by_attempt: dict[tuple[int, int], set[Key]] = {}  # the runs an end may close
            reach: set[Key] = set()  # runs counted from before they were reported (_pool_energy)
            for key in (*open_runs, *stored):
                by_attempt.setdefault((key[0], key[1]), set()).add(key)
            for event in events:
                if isinstance(event, _Start):
                    for run in event.runs:
                        if run.key in open_runs or run.key in closed:
                            continue
                        found = stored.pop(run.key, None)
                        open_runs[run.key] = found or run
                        if found is not None or run.advanced_at < event.at:
                            reach.add(run.key)
                        by_attempt.setdefault((run.key[0], run.key[1]), set()).add(run.key)
                    continue
                for key in by_attempt.get((event.job_id, event.attempt), ()):
                    if key in closed or (event.replica is not None and key[2] != event.replica):
                        continue  # ended once: a later release does not move its end
                    found = open_runs.pop(key, None)
                    if found is None:
                        found = stored.pop(key)
                        reach.add(key)
                    run = found
                    closed[key] = event.at
                    open_runs[key] = run  # advanced below, to its end
            window_start = self._last
            watts = self._watts(plane, open_runs.values())
            fresh: set[Key] = set()  # runs with no stored row yet: inserted
            for key, run in open_runs.items():
                end = closed.get(key, now)
                w = watts.get(key[3], 0.0)
                advanced = _advance(run, end, w)
                charged = self._pool_spans.get(key[3]) if key in reach else None
                if charged is not None:  # reported after its card's pool was charged: that
                    lo, hi = max(run.advanced_at, charged[0]), min(end, charged[1])  # stays
                    if hi > lo:  # the pool's (its counters never go back)
                        kept = advanced.energy_j - w * run.share * (hi - lo)
                        advanced = dataclasses.replace(advanced, energy_j=kept)
                changed[key] = advanced
                if not run.stored:
                    fresh.add(key)
                # runs of one label set advanced over one stretch are spread over buckets once
                span = spans.get((run.labels, run.advanced_at, advanced.advanced_at))
                if span is None:
                    span = spans[(run.labels, run.advanced_at, advanced.advanced_at)] = [0.0] * 4
                span[0] += advanced.device_seconds - run.device_seconds
                span[1] += advanced.gib_seconds - run.gib_seconds
                span[2] += advanced.cu_seconds - run.cu_seconds
                span[3] += advanced.energy_j - run.energy_j
            for (labels, start, end), sums in spans.items():
                if any(sums):
                    _priced_spread(rollup, labels, start, end, sums, schedule)
                    _accumulate(totals.setdefault(labels, [0.0] * len(SUMS)), sums)
            pool_spans = self._pool_energy(
                (open_runs, reach, closed), watts, window_start, now, rollup, totals, schedule
            )
            if learned:  # the first write: every read of the plane is done
                idle_power.store(conn, learned, now)
            _write_records(conn, changed.values(), closed, fresh)
            rollup_keys = self._write_sums(conn, rollup, totals)
            swept = self._swept is None or now - self._swept >= SWEEP_EVERY_S
            if swept:
                self._sweep(conn, now)
        # committed: memory follows
        self.flushes += 1
        self._adoptable = {k: r for k, r in adoptable.items() if k not in changed}
        if swept:  # rows may be gone: a bucket is read again when a flush next touches it
            self._rollup_rows.clear()
            self._rollup_buckets.clear()
        else:
            self._rollup_rows |= rollup_keys
            self._rollup_buckets |= {(step, bucket) for step, bucket, _l in rollup_keys}
        self._last = now
        self._pool_spans |= pool_spans
        if handed:  # the energy scorer's figures, once the store holds them
            self._idle_into = self.power
            plane.use_power(self.power)
        self._open = {k: r for k, r in changed.items() if k not in closed} | {
            k: r for k, r in self._open.items() if k not in changed and k not in closed
        }
        with self._events_lock:  # a scrape copies them (totals)
            for labels, sums in totals.items():
                _accumulate(self._totals.setdefault(labels, [0.0] * len(SUMS)), sums)
        return len(changed)

    def _reconcile(self, plane: ControlPlane) -> None:
        """Once per start, in a transaction of its own: close the stored open records of runs
        the plane does not hold, and read the others back to be continued when they are
        reported again. The held runs are read from the plane before it begins."""
        held = plane.read(lambda: {(j.id, j.attempt) for j in plane.held_jobs.values()})
        with plane.db.begin() as conn:
            _close_stale(conn, held)
            self._adoptable = _stored_open(conn, dict(self._open))
        self._reconciled = True

    def _learn_idle(
        self, conn: Connection, readings: list[tuple[str, float]], now: float
    ) -> tuple[dict[str, tuple[float, int]], bool]:
        """Add the idle cards' power ``readings`` (``idle_power.py``) and give the figures to
        the power model, which the energy below is counted with. Returns the models' figures
        that moved (the flush stores them) and whether the plane's energy scorer is to be given
        the model after the flush (``ControlPlane.use_power``)."""
        if not self.idle.seeded:
            self.idle.seed(conn)
        changed = self.idle.observe(readings, now)
        hand = bool(changed) or self._idle_into is not self.power
        if hand:
            self.power.learn_idle(self.idle.watts())
        return {k: self.idle.figures[k] for k in changed}, hand

    def _watts(self, plane: ControlPlane, runs: Iterable[Run]) -> dict[str, float]:
        """Each held card's power now: its agent's reading, else the catalog model at its
        reported utilisation (unreported: busy)."""
        cards = {r.key[3]: r.model for r in runs}
        readings = plane.read(lambda: {u: plane.device_metrics(u) for u in cards})
        out = {}
        for uuid, model in cards.items():
            m = readings.get(uuid)
            out[uuid] = self.power.watts(
                model,
                None if m is None else m.utilization_pct,
                None if m is None else m.power_w,
            )
        return out

    def _pool_energy(
        self,
        flushed: tuple[Mapping[Key, Run], set[Key], Mapping[Key, float]],
        watts: Mapping[str, float],
        window_start: float | None,
        now: float,
        rollup: dict[tuple[str, float, Labels], Sums],
        totals: dict[Labels, Sums],
        schedule: PriceSchedule,
    ) -> dict[str, tuple[float, float]]:
        """Each card's energy over its stretch less what its holders are charged in it: the
        pool's. A card's stretch is the window since the last flush, reaching back to where a
        run on it that was counted from before it was reported was last counted (one a
        restarted plane continues from its stored record: the time the plane was down; one
        reported after it began), so holders and pool add up over every second a holder is
        charged for. A meter's first flush has no window: only such runs open one. What this
        process charged the card's pool for already (its span) is not charged again (a run
        counted from inside it, one reported again after its card's pool was charged, is not
        charged the energy of that part: :meth:`_flush`). All at the watts the runs are
        advanced with.
        ``flushed``: the runs as before this flush advances them, those of them counted from
        before they were reported, the ends; returns the cards' spans, kept once the flush
        commits."""
        runs, reach, closed = flushed
        cards: dict[str, list[Run]] = {}
        for run in runs.values():
            cards.setdefault(run.key[3], []).append(run)
        pool: dict[tuple[Labels, float, float], float] = {}  # one spread per site, model, stretch
        spans: dict[str, tuple[float, float]] = {}
        for uuid, held in cards.items():
            back_to = [r.advanced_at for r in held if r.key in reach]
            if window_start is not None:
                back_to.append(window_start)
            if not back_to:  # a first flush: nothing before it was watched
                continue
            lo = min(back_to)
            span = self._pool_spans.get(uuid)
            pieces = [(lo, now)] if span is None else [(lo, span[0]), (max(lo, span[1]), now)]
            w = watts.get(uuid, 0.0)
            labels = (POOL, "", held[0].site, held[0].model)
            for start, end in pieces:
                if end > start:
                    rest = w * (end - start) - _held(held, closed, w, start, end, now)
                    if rest > 1e-9:
                        pool[(labels, start, end)] = pool.get((labels, start, end), 0.0) + rest
            spans[uuid] = (lo, now) if span is None else (min(lo, span[0]), max(now, span[1]))
        for (labels, lo, hi), energy in pool.items():
            sums = [0.0, 0.0, 0.0, energy]
            _priced_spread(rollup, labels, lo, hi, sums, schedule)
            _accumulate(totals.setdefault(labels, [0.0] * len(SUMS)), sums)
        return spans

    def _sweep(self, conn: Connection, now: float) -> None:
        """Records ended and rollup buckets over before the usage retention's start go (a
        month that began before it stays until it is all before it); totals stay."""
        cut = now - self.keep_s
        r = usage_rollups
        conn.execute(delete(usage_records).where(usage_records.c.ended_at < cut))
        for step, step_s in STEPS.items():
            conn.execute(delete(r).where(r.c.step == step, r.c.bucket <= cut - step_s))
        conn.execute(delete(r).where(r.c.step == "month", r.c.bucket < month_start(cut)))
        self._rollup_rows.clear()  # read again as flushes touch them (some may be gone); the
        self._rollup_buckets.clear()  # flush keeps them so once committed (a bucket's rows
        self._swept = now  # known in part are not known)

    def _write_sums(
        self,
        conn: Connection,
        rollup: Mapping[tuple[str, float, Labels], Sums],
        totals: Mapping[Labels, Sums],
    ) -> set[tuple[str, float, Labels]]:
        """Add the flush's sums to their rows, one UPDATE that adds and one INSERT each run for
        many rows; returns the rollup rows known stored now (those of the buckets read, those
        written). Which rows exist is known in memory: the
        totals' are the meter's totals (seeded from the store), a bucket's rows are read the
        first time this process touches the bucket, then kept (one writer, and the sweep
        deletes only buckets no flush touches again)."""
        r = usage_rollups
        read: set[tuple[str, float, Labels]] = set()  # rows of buckets read for the first time
        for step, bucket in sorted({(st, b) for st, b, _l in rollup} - self._rollup_buckets):
            found = conn.execute(
                select(r.c.step, r.c.bucket, *(r.c[n] for n in LABELS)).where(
                    r.c.step == step, r.c.bucket == bucket
                )
            ).all()
            read.update((str(x[0]), float(x[1]), (x[2], x[3], x[4], x[5])) for x in found)
        have: set[tuple[object, ...]] = set(self._rollup_rows) | set(read)
        _add_rows(
            conn,
            r,
            ("step", "bucket"),
            {(s, b, *labels): v for (s, b, labels), v in rollup.items()},
            have,
            ROLLUP_SUMS,
        )
        assert self._totals is not None  # read at the flush's start
        have_totals: set[tuple[object, ...]] = {(k,) for k in self._totals}
        totals_rows = {tuple(k): v for k, v in totals.items()}
        _add_rows(conn, usage_totals, (), totals_rows, have_totals, SUMS)
        return read | set(rollup)

    def totals(self, plane: ControlPlane) -> dict[Labels, Sums]:
        """The all-time sums per (tenant, queue, site, model): ``/metrics``' counters, seeded
        from the store, so they never go back across a restart."""
        if self._totals is None:
            with plane.db.connect() as conn:
                seeded = _read_totals(conn)
            with self._events_lock:
                if self._totals is None:
                    self._totals = seeded
        with self._events_lock:
            return {k: list(v) for k, v in self._totals.items()}

    def open_runs(self) -> int:
        return len(self._open)


def _advance(run: Run, end: float, watts: float) -> Run:
    """``run`` counted up to ``end`` (never backwards). Built field by field: this runs for
    every held card at every flush, and ``dataclasses.replace`` costs several times as much."""
    dt = max(end - run.advanced_at, 0.0)
    held = run.share * dt
    return Run(
        run.key,
        run.tenant,
        run.queue,
        run.priority,
        run.site,
        run.node,
        run.model,
        run.share,
        run.memory_gib,
        run.units,
        run.started_at,
        max(end, run.advanced_at),
        run.seconds + dt,
        run.device_seconds + held,
        run.gib_seconds + run.memory_gib * dt,
        run.cu_seconds + held * run.units,
        run.energy_j + watts * held,
        True,  # written by the flush that advances it
    )


def _held(
    runs: Iterable[Run], closed: Mapping[Key, float], watts: float, lo: float, hi: float, now: float
) -> float:
    """The energy ``runs`` are charged for in [lo, hi) of their card at ``watts``."""
    return sum(
        watts * r.share * max(min(closed.get(r.key, now), hi) - max(r.advanced_at, lo), 0.0)
        for r in runs
    )


def _accumulate(into: Sums, sums: Sums) -> None:
    for i, v in enumerate(sums):
        into[i] += v


def _spread(
    rollup: dict[tuple[str, float, Labels], Sums],
    labels: Labels,
    start: float,
    end: float,
    sums: Sums,
) -> None:
    hour = math.floor(start / 3600.0) * 3600.0
    if end <= hour + 3600.0:  # inside one hour, so one day and one month: no fractions
        day = math.floor(start / 86400.0) * 86400.0
        for key in (("hour", hour, labels), ("day", day, labels), ("month", _month(day), labels)):
            row = rollup.get(key)
            if row is None:
                rollup[key] = list(sums)
            else:
                _accumulate(row, sums)
        return
    for step, bucket, fraction in spread(start, end):
        row = rollup.setdefault((step, bucket, labels), [0.0] * len(sums))
        _accumulate(row, [v * fraction for v in sums])


def _priced_spread(
    rollup: dict[tuple[str, float, Labels], Sums],
    labels: Labels,
    start: float,
    end: float,
    sums: Sums,
    schedule: PriceSchedule,
) -> None:
    """:func:`_spread` of ``sums`` (SUMS) and their cost: the stretch is cut at each price
    change inside it, each part (its share of the sums by time) priced at its own table."""
    pieces = schedule.pieces(start, end)
    if len(pieces) == 1:  # the common case: no change inside, one table (or none)
        prices = pieces[0][2]
        cost = 0.0 if prices is None else prices.cost(labels[3], sums[0], sums[2], sums[3])
        _spread(rollup, labels, start, end, [*sums, cost])
        return
    span = end - start
    for lo, hi, prices in pieces:
        part = [v * (hi - lo) / span for v in sums]
        cost = 0.0 if prices is None else prices.cost(labels[3], part[0], part[2], part[3])
        _spread(rollup, labels, lo, hi, [*part, cost])


def _named(events: list[_Start | _End], adoptable: Mapping[Key, Run]) -> dict[Key, Run]:
    """The adoptable records of the jobs the events name (runs adopted after a restart, or
    released before they were reported again)."""
    if not adoptable:
        return {}
    jobs = {e.job_id for e in events if isinstance(e, _End)}
    jobs |= {r.key[0] for e in events if isinstance(e, _Start) for r in e.runs}
    return {k: r for k, r in adoptable.items() if k[0] in jobs}


@functools.lru_cache(maxsize=64)
def _month(day: float) -> float:
    """The start of the UTC month holding the day starting at ``day`` (a few days per flush)."""
    return month_start(day)


def _stored_open(conn: Connection, held: Mapping[Key, Run]) -> dict[Key, Run]:
    """The stored open records memory does not hold (after :func:`_close_stale`: those of runs
    the plane holds, to be continued when they are reported again). Read once per start: every
    record written later is in memory until it is closed."""
    t = usage_records
    rows = conn.execute(select(t).where(t.c.ended_at.is_(None))).mappings()
    out: dict[Key, Run] = {}
    for r in rows:
        key = (int(r["job_id"]), int(r["attempt"]), int(r["replica"]), str(r["uuid"]))
        out[key] = Run(
            key=key,
            tenant=str(r["tenant"]),
            queue=str(r["queue"]),
            priority=int(r["priority"]),
            site=str(r["site"]),
            node=str(r["node"]),
            model=str(r["model"]),
            share=float(r["share"]),
            memory_gib=float(r["memory_gib"]),
            units=float(r["units"]),
            started_at=float(r["started_at"]),
            advanced_at=float(r["advanced_at"]),
            seconds=float(r["seconds"]),
            device_seconds=float(r["device_seconds"]),
            gib_seconds=float(r["gib_seconds"]),
            cu_seconds=float(r["cu_seconds"]),
            energy_j=float(r["energy_j"]),
            stored=True,
        )
    return {k: r for k, r in out.items() if k not in held}


def _close_stale(conn: Connection, held: set[tuple[int, int]]) -> None:
    """Close, where last counted, the stored open records of runs the plane does not hold."""
    t = usage_records
    rows = conn.execute(
        select(t.c.job_id, t.c.attempt).where(t.c.ended_at.is_(None)).distinct()
    ).all()
    for job_id, attempt in rows:
        if (int(job_id), int(attempt)) in held:
            continue
        conn.execute(
            update(t)
            .where(t.c.job_id == job_id, t.c.attempt == attempt, t.c.ended_at.is_(None))
            .values(ended_at=t.c.advanced_at)
        )


def _write_records(
    conn: Connection, runs: Iterable[Run], closed: Mapping[Key, float], fresh: set[Key]
) -> None:
    """Insert the ``fresh`` runs' rows, update the others' (one statement each, run for many
    rows)."""
    t = usage_records
    new, old = [], []
    for run in runs:
        row = {
            "job_id": run.key[0],
            "attempt": run.key[1],
            "replica": run.key[2],
            "uuid": run.key[3],
            "advanced_at": run.advanced_at,
            "ended_at": closed.get(run.key),
            "seconds": run.seconds,
            **{f: getattr(run, f) for f in SUMS},
        }
        if run.key not in fresh:
            old.append(row)
            continue
        row |= {
            f: getattr(run, f)
            for f in (*LABELS, "priority", "node", "share", "memory_gib", "units", "started_at")
        }
        new.append(row)
    insert_rows(conn, t, new)
    if old:  # one statement, run for many rows: the runs advanced by this flush
        key = and_(*(t.c[k] == bindparam(f"k_{k}") for k in _KEY))
        moved = ("advanced_at", "ended_at", "seconds", *SUMS)
        statement = update(t).where(key).values({k: bindparam(f"v_{k}") for k in moved})
        update_rows(
            conn,
            statement,
            [{f"k_{k}": row[k] for k in _KEY} | {f"v_{k}": row[k] for k in moved} for row in old],
        )


_KEY = ("job_id", "attempt", "replica", "uuid")


def _add_rows(
    conn: Connection,
    t: Table,
    extra: tuple[str, ...],
    sums: Mapping[tuple[Any, ...], Sums],
    have: set[tuple[object, ...]],
    names: tuple[str, ...],
) -> None:
    keys = (*extra, *LABELS)
    old: list[dict[str, Any]] = []
    new: list[dict[str, Any]] = []
    for key, values in sums.items():
        row = dict(zip(keys, key, strict=True)) | dict(zip(names, values, strict=True))
        marker = (*key[: len(extra)], tuple(key[len(extra) :]))
        (old if marker in have else new).append(row)
    if old:
        where = and_(*(t.c[k] == bindparam(f"k_{k}") for k in keys))
        adds = {n: t.c[n] + bindparam(f"v_{n}") for n in names}
        update_rows(
            conn,
            update(t).where(where).values(adds),
            [{f"k_{k}": row[k] for k in keys} | {f"v_{n}": row[n] for n in names} for row in old],
        )
    insert_rows(conn, t, new)


def _read_totals(conn: Connection) -> dict[Labels, Sums]:
    t = usage_totals
    return {
        (r[0], r[1], r[2], r[3]): [float(v) for v in r[4:]]
        for r in conn.execute(select(*(t.c[n] for n in (*LABELS, *SUMS)))).all()
    }
