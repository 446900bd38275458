"""Allocations in the store that the engine cannot take back, and what the server does with them.

The server never writes an allocation that over-commits a device or sits on a device that is gone,
but a store from a buggy past release, a hand-edited database or a hostile one may hold one.
Refusing to start would keep the whole pool down until someone edits the database, so the server
sets each aside and serves on: it is named in the log and on ``/healthz``, its job gets an event
and is requeued (or marked lost, per its ``on_node_lost`` policy, as when its node is lost), and
the device or node it touches is cordoned until the admin has looked and uncordons it.

This module says what is wrong (:class:`Problem`); the plane sets it aside in its own books
(``plane/control.py``, ``ControlPlane.settle``), so that the plane and this module do not import
each other.
"""

from __future__ import annotations

from dataclasses import dataclass

from xpupool.engine.engine import Engine
from xpupool.model.allocation import Allocation
from xpupool.model.errors import Conflict, OverCommit


@dataclass(frozen=True, slots=True)
class Problem:
    """One held job's allocation the engine could not re-apply. ``devices`` and ``node`` are
    what it touches, cordoned when it is set aside."""

    job_id: int
    reason: str
    devices: tuple[str, ...] = ()
    node: str | None = None


def problem_for(engine: Engine, job_id: int, alloc: Allocation, error: Conflict) -> Problem:
    """Why ``alloc`` of ``job_id`` does not fit ``engine``'s pool (``error`` is what applying it
    raised)."""
    if engine.node_index(alloc.node) is None:
        return Problem(
            job_id, f"allocation {alloc.id} of job {job_id} is on node {alloc.node}, which is gone"
        )
    owners = {d.uuid: engine.device(d.uuid) for d in alloc.devices}
    gone = [uuid for uuid, found in owners.items() if found is None]
    if gone:
        return Problem(
            job_id,
            f"allocation {alloc.id} of job {job_id} holds device {gone[0]}, which node "
            f"{alloc.node} no longer has",
            node=alloc.node,
        )
    elsewhere = [(uuid, f[0]) for uuid, f in owners.items() if f is not None and f[0] != alloc.node]
    if elsewhere:  # a store from a buggy past or a hostile edit: charged to one node, on another
        uuid, owner = elsewhere[0]
        return Problem(
            job_id,
            f"allocation {alloc.id} of job {job_id} on node {alloc.node} holds device "
            f"{uuid}, which is node {owner}'s",
            node=alloc.node,
        )
    if isinstance(error, OverCommit):
        where = (error.uuid,) if error.uuid is not None else ()
        return Problem(job_id, f"{error} (job {job_id})", where, None if where else alloc.node)
    return Problem(job_id, f"{error} (job {job_id})", tuple(d.uuid for d in alloc.devices))
