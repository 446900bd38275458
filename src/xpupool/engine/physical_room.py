"""Where a guaranteed share may go: only where its card stays committed within its physical size.

An operator's over-commit factor (``Device.memory_overcommit``, ``cores_overcommit``;
docs/capacity.md) lets the engine commit more of a card than it has, betting that sharers do not
all use what they asked at once. A job of QoS class ``guaranteed`` (``model/qos.py``) must not be
part of that bet: a share of it is placed on a card only if the card's committed memory and
compute, after the share, stay within the card's physical memory and one card's compute. Best-effort
and burstable shares may use the over-committed part, as every share did before classes existed.

With ``committed = commit - free``, the rule ``committed + need <= physical`` is
``need <= free - (commit - physical)``: the engine's one capacity rule (``capacity.share_fits``)
asked of the free amounts less each card's over-committed part. A whole card, a partition or a
hardware-isolated slice is taken alone, so nothing shares it and the rule does not apply. The
pipeline ANDs the mask into the devices a replica may use (``Pipeline.filter``) and blames the
nodes it empties on ``Reason.PHYSICAL_CAPACITY``, a reason preemption may cure: freeing a
best-effort share on the card, the lowest priority of its queue, is what the planner takes first.
"""

from __future__ import annotations

import numpy as np

from xpupool.engine.capacity import share_fits
from xpupool.engine.state import BoolArray, ClusterState, IntArray
from xpupool.model.qos import physical_only
from xpupool.model.request import WHOLE, Request


def physical_free(state: ClusterState) -> tuple[IntArray, IntArray]:
    """``[N, W]`` memory (MiB) and compute (thousandths) a physical-only share may still take
    on each card: the free amounts less the card's over-committed part. Negative where the card
    is already committed beyond its physical size (by shares that may ride there)."""
    over_mib = state.dev_mem_commit - state.dev_mem_total
    over_core = state.dev_core_commit - np.where(state.dev_present, WHOLE, 0)
    mem: IntArray = state.dev_mem_free - over_mib
    core: IntArray = state.dev_core_free - over_core
    return mem, core


def overcommitted(state: ClusterState) -> bool:
    """Does any card of the pool commit more than it physically has?"""
    return bool(
        np.any(state.dev_mem_commit > state.dev_mem_total)
        or np.any(state.dev_core_commit > np.where(state.dev_present, WHOLE, 0))
    )


def applies(req: Request) -> bool:
    """Is ``req``'s every device a share that must stay within physical capacity?"""
    return physical_only(req.qos) and req.devices.count > 0 and req.devices.shares_specified


def physical_room(
    state: ClusterState, req: Request, need_mib: int | IntArray, need_core: int
) -> BoolArray | None:
    """``[N, W]`` cards where one share of ``need_mib`` MiB and ``need_core`` thousandths keeps
    the card committed within its physical capacity, for a request the rule applies to
    (:func:`applies`); None where it does not apply or no card of the pool is over-committed
    (every card then passes, and the pipeline keeps its cached fast path)."""
    if not applies(req) or not overcommitted(state):
        return None
    mem, core = physical_free(state)
    return share_fits(mem, core, state.dev_task_free, need_mib, need_core)
