"""The dry run of online defragmentation (issue 54 part 3): what the scheduling cycle's planner
(``engine/cycle/defrag.py``, through ``server/plane/defrag_moves.py``) would move now for each
pending job, and what that would free, read under one hold of the plane's lock. Every plan is a
what-if rolled back: nothing in memory or in the store changes, and the budget's ledger is only
read."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from xpupool.engine.cycle.defrag import HOUR_S, MovePlan
from xpupool.engine.outcomes import INADMISSIBLE
from xpupool.model.allocation import Allocation
from xpupool.model.request import fields_but
from xpupool.server.plane import ControlPlane, defrag_moves
from xpupool.server.plane.records import PendingJob
from xpupool.server.schemas.defrag import Cards, DefragMove, DefragPlanItem, DefragPlanView

__all__ = ["plan"]

_SHAPE = fields_but("name")  # two requests alike in every field but their names fare alike


def plan(plane: ControlPlane) -> DefragPlanView:
    """The plans for the pending jobs, in the scheduler's order. A job waiting for jobs stopped
    for it, or that no quota change could admit, is left out (moves cannot help it now); a job
    like one no plan lets in (queue, priority, request) is not searched again."""

    def look() -> DefragPlanView:
        mover = defrag_moves.planner(plane)
        pending = [
            j
            for j in plane.queued.values()
            if not j.waiting_on and not j.reason.startswith(INADMISSIBLE)
        ]
        items = []
        none_for: set[tuple[object, ...]] = set()  # shapes no plan lets in: not searched again
        for i in plane.cycle.order(pending):
            job = pending[i]
            key = (job.queue, job.priority, _SHAPE(job.request))
            if key in none_for:
                continue
            found = mover.plan(plane.engine, job, plane.held_jobs)
            if found is None:
                none_for.add(key)
            else:
                items.append(_item(job, found))
        return DefragPlanView(enabled=plane.defrag is not None, plans=items)

    return plane.read(look)


def _item(job: PendingJob, found: MovePlan) -> DefragPlanItem:
    moves = [
        DefragMove(
            job=m.job.id,
            tenant=m.facts.tenant,
            holds=_cards(m.job.allocations),
            gpu_hours_lost=m.facts.lost_card_s / HOUR_S,
        )
        for m in found.moves
    ]
    return DefragPlanItem(
        job=job.id,
        tenant=job.tenant,
        moves=moves,
        frees=_cards(found.frees),
        gpu_hours_lost=found.lost_card_s / HOUR_S,
    )


def _cards(allocations: Iterable[Allocation]) -> list[Cards]:
    """The cards of ``allocations`` per node, in node order."""
    by_node: dict[str, list[str]] = defaultdict(list)
    for a in allocations:
        by_node[a.node].extend(d.uuid for d in a.devices if d.uuid not in by_node[a.node])
    return [Cards(node=n, cards=by_node[n]) for n in sorted(by_node)]
