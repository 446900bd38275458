"""How many replicas of a request the cluster could take at once, at most: a gang that asks for
more is refused without placing its replicas one by one.

Placing a gang costs one full filter-score-pick per replica, and a gang that does not fit is
rolled back only after its first replica that fits nowhere: a gang one replica larger than the
pool costs as much as filling the pool. Such gangs wait in the queue and are tried again whenever
capacity frees, so one tenant's few large gangs made every scheduling pass (and, through the
plane's lock, everyone's requests) slow (issue 18, ``bench/tenant_flood.py``). The bound here is
a necessary condition, computed from the filters of one replica and three divisions:

    node bound  = min(free CPU // cpu, free memory // memory, sum over passing cards of the
                  shares each could still hold // cards per replica)     (nodes one replica fits)
    gang bound  = sum of node bounds

Every replica needs all three on its node, so no placement holds more than the bound; a gang
within it is placed as before (it may still fail, e.g. on link groups). The refusal blames each
node that fits one replica on the resource that bounds it, as if the replicas that fit had been
placed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from xpupool.engine.capacity import copies, shares_that_fit
from xpupool.engine.physical_room import physical_free
from xpupool.engine.pipeline import Pipeline
from xpupool.engine.reasons import Reason, ReasonCount, Unschedulable
from xpupool.engine.state import BoolArray, IntArray
from xpupool.model.request import Request


@dataclass(frozen=True, slots=True)
class Room:
    """``at_most`` replicas fit at once; ``fit`` ``[N]`` the nodes one replica fits; ``bounds``
    the per-node bounds ``[N]`` with the reason each stands for; ``per_node`` ``[N]`` their
    minimum, what each node could take (counted where ``fit``)."""

    at_most: int
    fit: BoolArray
    bounds: tuple[tuple[IntArray, Reason], ...]
    per_node: IntArray


def gang_room(pipeline: Pipeline, req: Request, within: BoolArray | None = None) -> Room:
    """The bound for ``req`` on the pipeline's state now, counting up to ``req.replicas``
    (enough to decide). Changes nothing."""
    state = pipeline.state
    ctx = pipeline.context(req)
    ctx.within = within
    fit = pipeline.filter(ctx)
    cap = req.replicas
    bounds = [
        (copies(state.node_cpu_free, req.cpu_milli, cap), Reason.INSUFFICIENT_CPU),
        (copies(state.node_mem_free, req.memory_mib, cap), Reason.INSUFFICIENT_MEMORY),
    ]
    if ctx.k and ctx.dev_fit is not None:
        mem_free, core_free = (  # a guaranteed share counts physical room only
            (state.dev_mem_free, state.dev_core_free)
            if ctx.physical is None
            else physical_free(state)
        )
        each = shares_that_fit(
            mem_free,
            core_free,
            state.dev_task_free,
            ctx.need_mib,
            ctx.need_core,
            cap,
        )
        shares = np.where(ctx.dev_fit, each, 0)
        by_cards = np.minimum(shares.sum(axis=1) // ctx.k, cap)
        if np.any(np.asarray(ctx.need_mib) > 0):
            card_reason = Reason.INSUFFICIENT_DEVICE_MEMORY
        elif ctx.need_core:
            card_reason = Reason.INSUFFICIENT_DEVICE_CORES
        else:
            card_reason = Reason.TOO_FEW_DEVICES
        bounds.append((by_cards, card_reason))
    per_node = np.minimum.reduce([b for b, _ in bounds])
    return Room(int(per_node[fit].sum()), fit, tuple(bounds), per_node)


def gang_refusal(
    pipeline: Pipeline, req: Request, within: BoolArray | None, room: Room | None = None
) -> Unschedulable | None:
    """The refusal of gang ``req`` when more replicas are asked than could fit at once; None when
    the bound allows them (or when no node takes even one: the caller's first replica says why,
    as for any request). ``room`` is :func:`gang_room`'s answer when the caller has it. Changes
    nothing."""
    room = gang_room(pipeline, req, within) if room is None else room
    if room.at_most >= req.replicas or not room.fit.any():
        return None
    at_most = room.at_most
    note = (
        f"gang: replica {at_most + 1} of {req.replicas} fits nowhere; at most {at_most} fit at once"
    )
    return room_refusal(pipeline, req, within, room, at_most, note)


def room_refusal(
    pipeline: Pipeline,
    req: Request,
    within: BoolArray | None,
    room: Room,
    replica: int,
    note: str,
) -> Unschedulable:
    """A gang refused on its ``room``, failing at ``replica`` (0-based) with ``note``: the nodes
    one replica does not fit counted as explained, the others blamed on the resource that bounds
    them, as if the replicas that fit had been placed."""
    ctx = pipeline.context(req)
    ctx.within = within
    pipeline.filter(ctx)
    labels, blame = pipeline._blame(ctx)  # the nodes one replica does not fit, as explained
    binding = np.argmin(np.stack([b for b, _ in room.bounds]), axis=0)
    for i, (_, reason) in enumerate(room.bounds):  # the others: full once the replicas that fit are
        labels.append((reason, ""))
        blame[room.fit & (binding == i)] = len(labels) - 1
    merged: dict[tuple[Reason, str], int] = {}
    for label, n in enumerate(np.bincount(blame, minlength=len(labels))):
        if n and label:
            merged[labels[label]] = merged.get(labels[label], 0) + int(n)
    ordered = sorted(merged.items(), key=lambda kv: (-kv[1], kv[0][0], kv[0][1]))
    reasons = tuple(ReasonCount(r, n, d) for (r, d), n in ordered)
    return Unschedulable(pipeline.state.n_nodes, reasons, replica, note)
