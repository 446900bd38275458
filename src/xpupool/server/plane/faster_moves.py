"""Moving running jobs to faster cards on the plane's agent sites (issue 55): the scheduling
cycle's rule (``engine/cycle/faster_cards.py``) turned on by ``xpupool up --move-faster``, the
facts it asks of the held jobs, and the cards each moved job is held while it stops.

After a pass that tried every pending job it could (the free cards are then ones none of them
could take), :func:`step` asks the cycle once. A job may move when defragmentation could move it
(``HeldJob.movable``: a checkpoint signal and a preemption that requeues it; running, its
``min_run`` over, not stopping, not elastic, on agent nodes), it has speeds (declared with
``speed=``, else its tenant's measured ones, ``throughput_knowledge.py``) and a known run: its
``max_runtime``, else the mean run time of its shape learned from the jobs that succeeded (the
site choice's wait estimator, ``engine/site_choice.py``); what is left of that is the remaining
run the rule weighs, and the move's event says when it was estimated and from how many runs. A
job with neither is never moved.

The rule admits the job pinned to the faster cards and releases its old ones; the plane holds the
old ones again at once (its processes still run there until they are gone) and keeps the new ones
for it (:attr:`PlaneFaster.targets`), so nothing else can take either while it stops. The stop is
the one preemption path (``scheduling_pass._preempt``'s): stored, the agent sends the checkpoint
signal, SIGTERM and SIGKILL after the grace, the job is requeued once its replicas are gone; the
next pass places it on the kept cards (:func:`target`). A job that ends otherwise (it exits, is
cancelled) gives its kept cards back at the next step. A plane that restarts or rebuilds its
books meanwhile forgets the kept cards: the job is then placed as any requeued job.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from xpupool.catalog.throughput import as_request_speeds
from xpupool.engine.cycle.admission import Admitted
from xpupool.engine.cycle.faster_cards import FasterCards, FasterMove, FasterRule, RunFacts
from xpupool.engine.cycle.stop_cost import describe, lost_card_s
from xpupool.engine.outcomes import render
from xpupool.model.allocation import Allocation
from xpupool.model.request import Request
from xpupool.model.speeds import Speeds
from xpupool.server import job_lifecycle as lc
from xpupool.server.job_checkpoints import stop_cost_of
from xpupool.server.plane import defrag_moves
from xpupool.server.plane.faster_targets import PlaneConsolidation, PlaneFaster
from xpupool.server.plane.records import HeldJob, PendingJob
from xpupool.server.plane.undone import undone_on_failure
from xpupool.server.schemas.jobs import StopCause
from xpupool.server.throughput_knowledge import fleet_cards

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from xpupool.server.plane.control import ControlPlane

__all__ = ["PlaneFaster", "facts", "forget_kept", "keep_and_stop", "step", "target", "use"]


def use(plane: ControlPlane, rule: FasterRule) -> None:
    """Turn moves to faster cards on for ``plane`` (``xpupool up --move-faster``)."""
    plane.faster = PlaneFaster(FasterCards(lambda job_id: facts(plane, job_id), rule))


def facts(plane: ControlPlane, job_id: int) -> RunFacts | None:
    """What the rule weighs of held job ``job_id`` when it may be moved now (see the module
    docstring), else None. Under the plane's lock (the cycle asks it)."""
    found = defrag_moves.movable_now(plane, job_id)
    if found is None:
        return None
    job, request, cost = found
    run_s = _run_s(plane, job, request)
    if run_s is None or job.started_at is None:
        return None  # no end known: no gain to weigh
    speeds = _speeds(plane, job, request)
    if not speeds:
        return None
    request = replace(request, speeds=speeds)
    remaining = run_s[0] - (plane.clock() - job.started_at)
    return RunFacts(job.queue, request, remaining, cost.lost_s)


def _run_s(plane: ControlPlane, job: HeldJob, request: Request) -> tuple[float, int] | None:
    """The whole run the rule counts ``job`` to make and of how many finished runs it is
    learned: its ``max_runtime`` (0 runs), else the mean run time of its shape that the site
    choice's wait estimator learned (``engine/site_choice.py``, ``RunTimes``), else None."""
    if job.max_runtime_s is not None:
        return float(job.max_runtime_s), 0
    return plane.site_dispatch.runtimes.learned(request)


def _estimated(plane: ControlPlane, move: FasterMove) -> str:
    """'; remaining run estimated: mean of 3 runs of its shape' for a job moved without a
    ``max_runtime``, else ''."""
    held = plane.held_jobs.get(move.job.id)
    if held is None or held.movable is None:
        return ""
    run_s = _run_s(plane, held, held.movable)
    if run_s is None or run_s[1] == 0:
        return ""
    n = run_s[1]
    return f"; remaining run estimated: mean of {n} run{'s' if n != 1 else ''} of its shape"


def step(plane: ControlPlane) -> int:
    """Give back the kept cards of moved jobs that ended otherwise; then, when every pending job
    due was tried at the capacity there is now, ask the cycle once and stop each job it moved
    (stored, as one step); returns how many were moved. A step that fails part-way is undone:
    the store rolls back and memory is read back from it (the books rebuilt, so the cards kept
    in them are forgotten), as a scheduling batch is."""
    return undone_on_failure(plane, _step)


def _step(plane: ControlPlane) -> int:
    mover = plane.faster
    if mover is None:
        return 0
    with plane.locked():
        forget_kept(plane, mover)
        now = plane.clock()
        waiting = [j for j in plane.queued.values() if j.id not in mover.targets]
        if not plane.held_jobs or any(
            not plane.retry_gate.tried_now(j) and j.not_before <= now for j in waiting
        ):
            return 0
    with plane.write() as conn:
        cycle = plane.cycle
        cycle.faster = mover.cards
        moves = cycle.move_to_faster(plane.held_jobs)
        for move in moves:
            why = f"{render(move.outcome)}; {_against(plane, move)}{_estimated(plane, move)}"
            keep_and_stop(plane, conn, mover, move.job.id, move.old, move.admitted, why)
    return len(moves)


def keep_and_stop(
    plane: ControlPlane,
    conn: Connection,
    mover: PlaneFaster | PlaneConsolidation,
    job_id: int,
    old: tuple[Allocation, ...],
    admitted: Admitted,
    why: str,
) -> None:
    """Carry out a move the cycle committed (held job ``job_id`` admitted on ``admitted``'s
    cards, its ``old`` ones released): hold the old cards again while its processes run there,
    keep the new ones for it in ``mover``, and stop it by the one preemption path for ``why``
    (the work it loses appended). In ``conn``'s transaction, under the plane's lock."""
    held = plane.held_jobs[job_id]
    for alloc in old:  # its processes run there until they are gone
        plane.admission.restore(alloc, held.queue, held.flavor)
    mover.targets[held.id] = (plane.admission, admitted)
    cost = stop_cost_of(plane.held_jobs, plane.clock(), held.id)
    lost = lost_card_s(cost, held.allocations)
    plane.apply(conn, held.id, lc.Stop(StopCause.PREEMPTED, f"{why}; {describe(cost, lost)}"))


def target(plane: ControlPlane, job: PendingJob) -> Admitted | None:
    """The cards kept for ``job``, moved to faster cards (or by consolidation,
    ``consolidation_moves.py``) and requeued (taken: the caller places it there), or None.
    Under the plane's lock."""
    for mover in (plane.faster, plane.consolidation):
        kept = None if mover is None else mover.targets.pop(job.id, None)
        if kept is not None and kept[0] is plane.admission:
            return kept[1]  # (else the books were rebuilt since: its cards went with them)
    return None


def forget_kept(plane: ControlPlane, mover: PlaneFaster | PlaneConsolidation) -> None:
    """Kept cards of jobs neither stopping for their move nor requeued go back."""
    for job_id, (books, admitted) in list(mover.targets.items()):
        held = plane.held_jobs.get(job_id)
        if books is plane.admission and (
            job_id in plane.queued or (held is not None and held.stop is not None)
        ):
            continue
        del mover.targets[job_id]
        if books is plane.admission:
            for alloc in admitted.placement.allocations:
                plane.admission.release(alloc.id)
            plane.bump()  # a pending job may fit there now


def _against(plane: ControlPlane, move: FasterMove) -> str:
    """'A100 1x against T4 0.3x': the slowest card model of its new and of its old cards, with
    its speed on each as the job's speeds state it."""
    held = plane.held_jobs.get(move.job.id)
    if held is None or held.movable is None:
        return ""
    speeds = _speeds(plane, held, held.movable)
    new = _slowest(plane, speeds, list(move.admitted.placement.allocations))
    old = _slowest(plane, speeds, list(move.old))
    return f"{new[0]} {new[1]:g}x against {old[0]} {old[1]:g}x"


def _speeds(plane: ControlPlane, job: HeldJob, request: Request) -> Speeds:
    """The speeds the rule weighs for ``job``: declared, else its tenant's measured ones of its
    kind (none: ())."""
    if request.speeds:
        return request.speeds
    rows = plane.throughput.known_speeds(job.tenant, job.kind, fleet_cards(plane.engine))
    return as_request_speeds(rows) if rows else ()


def _slowest(plane: ControlPlane, speeds: Speeds, allocs: list[Allocation]) -> tuple[str, float]:
    """The card model of ``allocs`` where the job runs slowest, by its family name, and that
    speed as ``speeds`` state it (a model it names none for counts as its slowest named one)."""
    engine = plane.engine
    lowest = min((s for _, s in speeds), default=0.0)
    found: list[tuple[float, str]] = []
    for share in (d for a in allocs for d in a.devices):
        held = engine.device(share.uuid)
        if held is None:
            continue
        dev = held[1]
        speed = next(
            (s for m, s in speeds if engine.catalog.matches(m, dev.model, dev.vendor)), lowest
        )
        known = engine.catalog.lookup(dev.model)  # A100 rather than NVIDIA A100-SXM4-80GB
        found.append((speed, known.family or known.name if known is not None else dev.model))
    if not found:
        return ("?", 0.0)
    speed, model = min(found)
    return (model, speed)
