"""A job's replica bound to other cards than the plane placed it on: the plane's books follow
(issue 49, "the cards a gated pod really got").

On a Kubernetes site the plane admits a kubectl user's gated pod by removing its gate; the
extender then binds the pod to the node and cards it picks, which may not be those of the
plane's own placement (the plane's own pods carry their placement as constraints, so theirs
match). Left alone, the plane's books would hold the placement's cards while the pod holds
others: two pods could be given one card, and a free card counted held. So when the site sees
the pod bound, it hands the cards here and the job's allocation is re-addressed to them through
the engine host's one re-address path (:meth:`~xpupool.engine.host.EngineHost.reapply`, which
fixes the slots, all or none), its quota charged again under its flavour, its stored row
updated, with an event on the job. A gang's pods carry no card constraint, so they may be bound to
each other's cards: a replica whose cards a sibling holds waits for the sibling's pod, and all
move together. When the bound cards are held in the plane's books by another charge (the two
disagreed, each for a short while), nothing changes: the job keeps its placement's cards, an
event says so, and nothing is over-committed.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, NamedTuple

from sqlalchemy import update

from xpupool.model.allocation import Allocation, DeviceShare
from xpupool.server import job_lifecycle as lc
from xpupool.server.plane import foreign_use
from xpupool.server.plane.store import allocation_to_dict
from xpupool.server.storage.jobs import allocations as t_allocs

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from xpupool.server.plane.control import ControlPlane
    from xpupool.server.plane.records import HeldJob

__all__ = ["Bound", "Share", "rebind", "rebind_many"]

log = logging.getLogger(__name__)

Share = tuple[str, int, int]
"""(card UUID, memory MiB, compute permille) a pod was bound to."""


def _placed(job: HeldJob, replica: int) -> Allocation | None:
    return next((a for a in job.allocations if a.replica == replica), None)


def _same(alloc: Allocation, node: str, shares: Sequence[Share]) -> bool:
    return alloc.node == node and sorted(alloc.device_uuids) == sorted(u for u, _, _ in shares)


class Bound(NamedTuple):
    """Replica ``replica`` of held job ``job_id`` (of run ``attempt``; None: the current one)
    seen bound to ``shares`` on ``node`` (``where``: the pod, for the event)."""

    job_id: int
    replica: int
    node: str
    shares: tuple[Share, ...]
    where: str
    attempt: int | None = None


def rebind(
    plane: ControlPlane,
    job_id: int,
    replica: int,
    node: str,
    shares: Sequence[Share],
    where: str,
    attempt: int | None = None,
) -> bool:
    """One replica as :func:`rebind_many` takes a batch; returns whether it moved."""
    return rebind_many(plane, [Bound(job_id, replica, node, tuple(shares), where, attempt)]) > 0


def rebind_many(plane: ControlPlane, seen: Sequence[Bound]) -> int:
    """Re-address each replica of ``seen`` whose cards are not those of the plane's placement;
    returns how many jobs' books moved. A job not held, of another run, stopping, or already
    on those cards is left as it is. The whole batch is checked in one read of the plane: a
    restart's first list brings every pod of the plane's, nearly all on their placement's
    cards, and a read each took the plane's lock thousands of times (docs/benchmarks.md, a
    restart holding 10,000 pods); only a replica that differs takes a write."""

    def differs(b: Bound) -> bool:
        job = plane.held_jobs.get(b.job_id)
        if job is None or job.stop is not None:
            return False
        if b.attempt is not None and job.attempt != b.attempt:
            return False
        old = _placed(job, b.replica)
        return old is not None and not _same(old, b.node, b.shares)

    candidates = [b for b in seen if b.shares]
    if not candidates:
        return 0
    apart = plane.read(lambda: [b for b in candidates if differs(b)])
    moved = 0
    for b in apart:
        with plane.write() as conn:
            if not differs(b):
                continue
            job = plane.held_jobs[b.job_id]
            job.bound_apart[b.replica] = (job.attempt, b.node, b.shares, b.where)
            moved += _follow(plane, conn, job)
    return moved


def _follow(plane: ControlPlane, conn: Connection, job: HeldJob) -> bool:
    """Re-address, all together, every replica of ``job`` seen bound to other cards than its
    placement's: a gang's pods carry no card constraint, so the extender may bind them to each
    other's cards, and each alone would find its cards held by a sibling. When the cards are a
    sibling's not seen moving yet, they wait for it, quietly; when they are held for other
    work, each keeps its placement, with an event. Returns whether the books moved."""
    batch = {
        r: seen
        for r, seen in job.bound_apart.items()
        if seen[0] == job.attempt
        and (old := _placed(job, r)) is not None
        and not _same(old, seen[1], seen[2])
    }
    job.bound_apart = dict(batch)  # another run's, or back on its placement: forgotten
    olds = {r: alloc for r in batch if (alloc := _placed(job, r)) is not None}
    news = [
        replace(
            olds[r],
            node=node,
            node_index=-1,
            devices=tuple(DeviceShare(u, -1, mib, permille) for u, mib, permille in shares),
        )
        for r, (_, node, shares, _) in batch.items()
    ]
    admission = plane.admission
    for old in olds.values():
        admission.release(old.id)
    done = plane.host.reapply(plane.engine, [(job.id, tuple(news))])
    if done.refused:
        for old in olds.values():
            admission.restore(old, job.queue, job.flavor)  # their own slots: they fit again
        wanted = {u for _, _, shares, _ in batch.values() for u, _, _ in shares}
        siblings = {u for a in job.allocations if a.replica not in batch for u in a.device_uuids}
        if wanted & siblings:
            return False  # a sibling's pod not seen on its new cards yet
        for r, (_, node, shares, where) in batch.items():
            cards = ", ".join(u for u, _, _ in shares)
            why = (
                f"{where} bound to {cards} on {node}, which the plane's books hold for other "
                f"work: kept on {', '.join(olds[r].device_uuids)} on {olds[r].node}"
            )
            plane.apply(conn, job.id, lc.Note(why, sets_reason=False))
            log.warning("job %d: %s", job.id, why)
        job.bound_apart.clear()
        return False
    moved = {a.id: a for a in done.kept[job.id]}
    for bound in moved.values():
        admission.restore(bound, job.queue, job.flavor, in_engine=False)
    job.allocations = [moved.get(a.id, a) for a in job.allocations]
    for r, (_, node, shares, where) in batch.items():
        old = olds[r]
        bound = moved[old.id]
        conn.execute(
            update(t_allocs)
            .where(t_allocs.c.id == old.id)
            .values(node=node, data=allocation_to_dict(bound))
        )
        cards = ", ".join(u for u, _, _ in shares)
        why = (
            f"{where} bound to {cards} on {node} (placed on {', '.join(old.device_uuids)} on "
            f"{old.node}): its cards re-addressed"
        )
        plane.apply(conn, job.id, lc.Note(why, sets_reason=False))
        log.info("job %d: %s", job.id, why)
    job.bound_apart.clear()
    foreign_use.retry(plane)  # a foreign charge may wait for the cards given back
    plane.bump()
    return True
