"""Online defragmentation on the plane's agent sites (issue 54 part 3): the scheduling cycle's
option (``engine/cycle/defrag.py``) turned on by ``xpupool up --defrag``, the facts it asks of
the held jobs, and the ledger of the moves the plane carried out.

A held job may be moved when it declares a ``checkpoint_signal`` and a preemption requeues it
(``HeldJob.movable``, ``store.movable_request``), it runs (its ``min_run`` over), is not being
stopped, is not elastic (an elastic job shrinks instead, ``elastic_runs.py``) and runs on the
agent pool (a Kubernetes site does not defragment yet). A move is carried out as a preemption
is, by the one path (``scheduling_pass._preempt``): its stop is stored, the agent sends the
checkpoint signal, SIGTERM after it and SIGKILL after the job's grace, and the job is requeued
as pending once its replicas are gone; only its reason differs (``MovedToDefragment``).

The disruption budget's :class:`~xpupool.engine.cycle.defrag.MoveLedger` is the plane's, not the
cycle's (the cycle is rebuilt with the quota books), and each move, consolidation's too
(``consolidation_moves.py``), is also stored with its stop (``storage/defrag_moves.py``): a
restarted plane reads the last day's moves back into its ledger, so a restart does not reset the
budget (docs/defragmentation.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlalchemy import Connection, delete, insert, select

from xpupool.engine.cycle.defrag import DAY_S, Defrag, DisruptionBudget, MoveFacts
from xpupool.engine.cycle.stop_cost import StopCost, lost_card_s
from xpupool.model.request import Request
from xpupool.server.job_checkpoints import stop_cost_of
from xpupool.server.plane import store
from xpupool.server.plane.records import HeldJob, PendingJob
from xpupool.server.schemas.jobs import JobPhase
from xpupool.server.sites.agent_pool import SOURCES
from xpupool.server.storage.defrag_moves import defrag_moves as t_moves

if TYPE_CHECKING:
    from xpupool.server.plane.control import ControlPlane

__all__ = [
    "DEFAULT_MIN_CARDS",
    "PlaneDefrag",
    "facts",
    "movable",
    "movable_now",
    "planner",
    "record",
    "store_move",
    "use",
    "yields",
]

DEFAULT_MIN_CARDS = 1.0
"""``xpupool up --defrag-min-cards``' default: work moves only for a job asking a whole card or
more (a share of a card finds room as it is far more often)."""


class PlaneDefrag(Defrag):
    """The cycle's :class:`Defrag` with what the plane adds: ``moved_for``, {moved job: the job
    it was moved for}. A moved job is requeued as new, and new jobs are tried before those that
    failed earlier (``retry_gate.py``): placed first, it would take back the room its move made.
    So it waits (:func:`yields`) until the job it was moved for has been tried once since."""

    def __init__(self, plane: ControlPlane, budget: DisruptionBudget, min_cards: float) -> None:
        super().__init__(
            lambda job_id: facts(plane, job_id), plane.clock, budget, min_cards=min_cards
        )
        self.moved_for: dict[int, int] = {}


def use(plane: ControlPlane, budget: DisruptionBudget, min_cards: float) -> None:
    """Turn defragmentation on for ``plane`` within ``budget``, for pending jobs asking at least
    ``min_cards`` cards in all (``xpupool up --defrag``), with the moves of the last day the
    store holds in its ledger (a restart keeps the budget's windows)."""
    mover = PlaneDefrag(plane, budget, min_cards)
    since = plane.clock() - DAY_S
    query = select(t_moves).where(t_moves.c.at > since).order_by(t_moves.c.at, t_moves.c.id)
    with plane.db.connect() as conn:
        for row in conn.execute(query).mappings():
            mover.ledger.record(row["at"], row["tenant"], row["lost_card_s"])
            if row["kind"] == "defrag":  # (a consolidation move was made for no job)
                mover.moved_for[row["job_id"]] = row["for_job"]
    plane.defrag = mover


def planner(plane: ControlPlane) -> Defrag:
    """The plane's defragmentation, or, where it is off, one with the default budget and an
    empty ledger: what ``--defrag`` would do now (``GET /v1/defrag/plan``)."""
    if plane.defrag is not None:
        return plane.defrag
    return PlaneDefrag(plane, DisruptionBudget(), DEFAULT_MIN_CARDS)


def facts(plane: ControlPlane, job_id: int) -> MoveFacts | None:
    """What the planner knows of held job ``job_id`` when it may be moved now (see the module
    docstring), else None. Under the plane's lock (the cycle asks it)."""
    found = movable_now(plane, job_id)
    if found is None:
        return None
    job, request, cost = found
    return MoveFacts(job.tenant, request, lost_card_s(cost, job.allocations))


def movable_now(plane: ControlPlane, job_id: int) -> tuple[HeldJob, Request, StopCost] | None:
    """Held job ``job_id``, the request it is placed again with and what a stop now loses, when
    it may be moved now (see the module docstring; moves to faster cards too,
    ``faster_moves.py``), else None. Under the plane's lock."""
    job = plane.held_jobs.get(job_id)
    if (
        job is None
        or job.movable is None
        or job.elastic is not None
        or job.stop is not None
        or job.state is not JobPhase.RUNNING
    ):
        return None
    cost = stop_cost_of(plane.held_jobs, plane.clock(), job_id)
    if cost.protected:  # inside its min_run: a move waits as a preemption would
        return None
    records = [plane.node(a.node) for a in job.allocations]
    if not records or any(r is None or r.source not in SOURCES for r in records):
        return None
    return job, job.movable, cost


def movable(plane: ControlPlane, conn: Connection, job: PendingJob) -> Request | None:
    """The request ``job`` is held with as movable (``HeldJob.movable``) as it is placed, or
    None. Its row is read (for its retry policy) only when the job declares a checkpoint signal:
    no other placement pays for it. Kept with defragmentation off too, as a restarted plane
    reads it back, so that the dry run shows what ``--defrag`` would move."""
    if job.request.checkpoint_signal is None:
        return None
    return store.movable_request(store.job_row(conn, job.id), job.request)


def record(
    plane: ControlPlane, conn: Connection, moved: HeldJob, by: int, lost_card_s: float
) -> None:
    """``moved`` is being moved now for pending job ``by``, losing ``lost_card_s``: counted in
    the budget's ledger and stored (``conn``'s transaction, with the move's stop), and ``moved``
    yields to ``by`` once requeued (:func:`yields`). Stored moves older than a day go."""
    mover = plane.defrag
    if mover is None:
        return
    now = plane.clock()
    mover.ledger.record(now, moved.tenant, lost_card_s)
    if isinstance(mover, PlaneDefrag):
        mover.moved_for[moved.id] = by
    store_move(conn, now, moved, lost_card_s, by)


def store_move(
    conn: Connection, at: float, moved: HeldJob, lost_card_s: float, by: int | None = None
) -> None:
    """Store the move of ``moved`` at ``at`` (``conn``'s transaction, with the move's stop), for
    pending job ``by`` (None: a consolidation move, ``consolidation_moves.py``, for no job), so
    that a restarted plane counts it in its budget (:func:`use`). Stored moves older than a day
    go."""
    conn.execute(delete(t_moves).where(t_moves.c.at <= at - DAY_S))
    kind = "consolidate" if by is None else "defrag"
    row = {"at": at, "job_id": moved.id, "for_job": by or 0, "tenant": moved.tenant, "kind": kind}
    conn.execute(insert(t_moves).values(**row, lost_card_s=max(0.0, lost_card_s)))


def yields(plane: ControlPlane, job: PendingJob) -> bool:
    """Whether pending ``job``, moved for another job, is left for this pass: the job it was
    moved for is still pending and has not been tried since the pool last changed (the move's
    release changed it). Once that job was placed, refused again or is gone, ``job`` is tried
    as any other. Under the plane's lock."""
    mover = plane.defrag
    if not isinstance(mover, PlaneDefrag) or job.id not in mover.moved_for:
        return False
    by = plane.queued.get(mover.moved_for[job.id])
    if by is not None and not plane.retry_gate.tried_now(by):
        return True
    del mover.moved_for[job.id]
    return False
