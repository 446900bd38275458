"""What the plane has measured of how fast each job type runs on each card model (issue 55), and
the speeds it fills in for jobs that declare none.

A running replica reports its rate through its agent (``$XPUPOOL_PROGRESS_FILE``, read at each
heartbeat) or the API (``POST /v1/jobs/{id}/progress``): either way :meth:`report` takes it, under
the plane's lock, for the replica's card model, and writes the figure it makes to the store
(``storage/throughput.py``), from which a plane starting again reads it back (:meth:`load`).

A hostile job can touch only its own job type's figures, and only so far:

* job types are **per tenant**: a figure is keyed by (tenant, kind, card model), and a tenant's
  jobs are given speeds from its own figures only, so no tenant's reports move another's;
* each figure is a windowed mean whose reports are **clipped** to within ``MAX_STEP`` of it
  (``catalog/throughput.py``): one report moves it a bounded step;
* a rate is finite, above 0 and at most ``MAX_RATE`` (``model/progress.py``), checked at the edge;
* a tenant holds at most :data:`MAX_FIGURES_PER_TENANT` figures: new (kind, model) pairs past
  that are not learned, so reports cannot grow the store without bound.

Only replicas on whole cards of one model are measured, per card (the rate over the card count):
a share of a card runs at whatever its neighbours leave it, which says nothing of the model.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from sqlalchemy import Connection, insert, select, update

from xpupool.catalog.accelerators import AcceleratorModel
from xpupool.catalog.throughput import (
    CardSpeed,
    Measured,
    Source,
    ThroughputTable,
    as_request_speeds,
    card_speeds,
)
from xpupool.engine.engine import Engine
from xpupool.model.allocation import Allocation
from xpupool.server.storage.throughput import throughput_measured as t_measured

if TYPE_CHECKING:  # the plane's records import the plane, which holds this module's knowledge
    from xpupool.server.plane.records import HeldJob, PendingJob

MAX_FIGURES_PER_TENANT = 1000
WHOLE_CARD_PERMILLE = 1000


@dataclass(frozen=True, slots=True)
class Recorded:
    """What one report made: the card model it counted for and the figure now held."""

    model: str
    figure: Measured


@dataclass(frozen=True, slots=True)
class Progressed:
    """A report through the API: the job's kind, and what it made (None: not counted)."""

    kind: str
    recorded: Recorded | None


def scoped(tenant: str, kind: str) -> str:
    """The table's key of ``tenant``'s job type ``kind`` (a tenant name holds no '/')."""
    return f"{tenant}/{kind}"


class ThroughputKnowledge:
    """The plane's measured figures (a :class:`ThroughputTable` keyed per tenant) and their
    rows. Not thread-safe: used under the plane's lock."""

    def __init__(self) -> None:
        self.table = ThroughputTable()
        self._figures: Counter[str] = Counter()  # tenant -> figures held
        self._generation = 0  # moves at each report: cached speeds are then stale
        self._speeds: dict[tuple[str, str, tuple[str, ...]], tuple[CardSpeed, ...]] = {}
        self._speeds_at = -1

    def load(self, conn: Connection) -> None:
        """Take the stored figures (a plane starting)."""
        for row in conn.execute(select(t_measured)):
            figure = Measured(float(row.rate), int(row.runs), int(row.reports))
            self.table.put(scoped(row.tenant, row.kind), row.model, figure)
            self._figures[row.tenant] += 1
        self._generation += 1

    def report(
        self,
        conn: Connection,
        engine: Engine,
        *,
        tenant: str,
        kind: str,
        alloc: Allocation,
        rate: float,
        new_run: bool,
        now: float,
    ) -> Recorded | None:
        """Count ``rate`` (per second, validated at the edge) reported by the replica placed as
        ``alloc`` of ``tenant``'s job of ``kind``; None when it says nothing of a card model (a
        share of a card, cards of several models) or the tenant's figures are full."""
        models: set[str] = set()
        for share in alloc.devices:
            found = engine.device(share.uuid)
            if found is None or share.core_permille < WHOLE_CARD_PERMILLE:
                return None
            known = engine.catalog.lookup(found[1].model)
            models.add(known.name if known is not None else found[1].model)
        if len(models) != 1:
            return None
        model = models.pop().upper()
        key = scoped(tenant, kind)
        old = self.table.get(key, model)
        if old is None and self._figures[tenant] >= MAX_FIGURES_PER_TENANT:
            return None
        figure = self.table.report(key, model, rate / len(alloc.devices), new_run=new_run)
        values = {"rate": figure.rate, "runs": figure.runs, "reports": figure.reports}
        if old is None:
            self._figures[tenant] += 1
            row = {"tenant": tenant, "kind": kind, "model": model, **values, "updated_at": now}
            conn.execute(insert(t_measured).values(row))
        else:
            where = (t_measured.c.tenant == tenant) & (t_measured.c.kind == kind)
            conn.execute(
                update(t_measured)
                .where(where & (t_measured.c.model == model))
                .values(**values, updated_at=now)
            )
        self._generation += 1
        return Recorded(model, figure)

    def report_run(
        self, conn: Connection, engine: Engine, job: HeldJob, replica: int, rate: float, now: float
    ) -> Recorded | None:
        """Replica ``replica`` of running held ``job`` runs at ``rate`` per second (validated
        at the edge); see :meth:`report`. None when nothing was learned: the job has no kind, no
        such replica, or the report says nothing of one card model."""
        alloc = next((a for a in job.allocations if a.replica == replica), None)
        if job.kind is None or alloc is None:
            return None
        new_run = replica not in job.progressed
        job.progressed.add(replica)
        return self.report(
            conn,
            engine,
            tenant=job.tenant,
            kind=job.kind,
            alloc=alloc,
            rate=rate,
            new_run=new_run,
            now=now,
        )

    def known_speeds(
        self, tenant: str, kind: str | None, cards: tuple[AcceleratorModel | str, ...]
    ) -> tuple[CardSpeed, ...]:
        """``tenant``'s measured speeds of ``kind`` on ``cards`` (the fleet's card models, by
        catalog model or printed name; estimated where not measured), or () when fewer than two
        models are measured. Cached until the next report."""
        if kind is None or not cards:
            return ()
        if self._speeds_at != self._generation:
            self._speeds.clear()
            self._speeds_at = self._generation
        names = tuple(c if isinstance(c, str) else c.name for c in cards)
        found = self._speeds.get((tenant, kind, names))
        if found is None:
            rows = card_speeds(scoped(tenant, kind), cards, table=self.table)
            found = tuple(rows) if any(r.source is Source.MEASURED for r in rows) else ()
            self._speeds[(tenant, kind, names)] = found
        return found


def fleet_cards(engine: Engine) -> tuple[AcceleratorModel | str, ...]:
    """The pool's card models as :func:`card_speeds` takes them: the catalog's model where it
    knows the printed name (so an unmeasured one is estimated), else the printed name."""
    out: dict[str, AcceleratorModel | str] = {}
    for _vendor, printed in engine.pool_models():
        known = engine.catalog.lookup(printed)
        out.setdefault(known.name if known is not None else printed, known or printed)
    return tuple(out.values())


def fill_speeds(knowledge: ThroughputKnowledge, engine: Engine, jobs: Iterable[PendingJob]) -> None:
    """Give each pending job that declares no speeds its tenant's measured speeds of its kind
    (``PendingJob.known_speeds``, and as ``Request.speeds``, which the throughput scorer reads),
    refreshed as the figures move; a job's own speeds are left as they are."""
    cards: tuple[AcceleratorModel | str, ...] | None = None
    for job in jobs:
        if job.request.speeds and not job.known_speeds:
            continue  # declared by the job
        if cards is None:
            cards = fleet_cards(engine)
        rows = knowledge.known_speeds(job.tenant, job.request.kind, cards)
        if rows != job.known_speeds:
            job.known_speeds = rows
            job.request = replace(job.request, speeds=as_request_speeds(rows))
