"""Consolidation in quiet periods on the plane's agent sites (issue 54 part 3): the scheduling
cycle's step (``engine/cycle/consolidate.py``) turned on by ``xpupool up --defrag --consolidate``.

After each scheduling pass, :func:`step` tells the cycle whether a job waits; once none has for
the rule's quiet time, the cycle picks the few moves of movable work (``HeldJob.movable``, as
defragmentation's: ``defrag_moves.movable_now``) that free cards for the largest shape the learned
workload expects and lower its fragmentation, within the defragmentation's budget, and commits
them pinned to the new cards. Each move is then carried out as a move to faster cards is
(``faster_moves.py``): the old cards are held again while the job's processes run there, the new
ones are kept for it (:attr:`PlaneConsolidation.targets`, placed by ``faster_moves.target``), and
the stop is the one preemption path, its reason naming what the move frees
("consolidating: freeing node n2 for 4-card jobs; ..."). The cycle counts the move in the
budget's ledger, and it is stored with its stop as a defragmentation move is
(``defrag_moves.store_move``), so a restarted plane counts it too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from xpupool.engine.cycle.consolidate import Consolidation, ConsolidationRule
from xpupool.engine.outcomes import render
from xpupool.server.plane import defrag_moves
from xpupool.server.plane.faster_moves import forget_kept, keep_and_stop
from xpupool.server.plane.faster_targets import PlaneConsolidation
from xpupool.server.plane.undone import undone_on_failure

if TYPE_CHECKING:
    from xpupool.server.plane.control import ControlPlane

__all__ = ["step", "use"]


def use(plane: ControlPlane, rule: ConsolidationRule) -> None:
    """Turn consolidation on for ``plane`` (``xpupool up --consolidate``), on its
    defragmentation's movable work and budget (``defrag_moves.use`` first)."""
    if plane.defrag is None:
        raise ValueError("consolidation needs defragmentation (its budget) on")
    plane.consolidation = PlaneConsolidation(Consolidation(plane.defrag, rule))


def step(plane: ControlPlane) -> int:
    """Give back the kept cards of moved jobs that ended otherwise; then ask the cycle once,
    telling it whether a job waits, and stop each job it moved (stored, as one step); returns
    how many were moved. A step that fails part-way is undone (``undone.py``)."""
    return undone_on_failure(plane, _step)


def _step(plane: ControlPlane) -> int:
    mover = plane.consolidation
    if mover is None:
        return 0
    with plane.locked():
        forget_kept(plane, mover)
        waiting = bool(plane.queued)
        if not plane.held_jobs:
            return 0
    with plane.write() as conn:
        cycle = plane.cycle
        cycle.consolidation = mover.step
        moves = cycle.consolidate(plane.held_jobs, waiting)
        now = plane.clock()
        for move in moves:
            defrag_moves.store_move(conn, now, plane.held_jobs[move.job.id], move.lost_card_s)
            why = render(move.outcome)
            keep_and_stop(plane, conn, mover, move.job.id, move.old, move.admitted, why)
    return len(moves)
