"""A pod's containers placed on one node, for real (bind) or as a what-if (filter, preemption).

A pod's containers must share its node; each is one engine request. Placing them all inside one
transaction answers both "do they fit together here?" (rolled back) and "take their shares"
(committed), with one code path and one failure text.
"""

from __future__ import annotations

import numpy as np

from xpupool.engine import Engine, Transaction
from xpupool.engine.state import BoolArray
from xpupool.k8s.pod_request import PodDemand
from xpupool.model.allocation import Allocation

NOT_IN_POOL = "node has no device xpupool manages"


def node_mask(engine: Engine, node: int) -> np.ndarray:
    """The devices of one node: what a placement ``within`` it may use."""
    state = engine.state
    within = np.zeros_like(state.dev_present)
    within[node] = state.dev_present[node]
    return within


def place_containers(engine: Engine, demand: PodDemand, node: int, txn: Transaction) -> str | None:
    """Place every container of the pod on ``node`` inside ``txn``; why not (``container NAME:
    reason``) when one does not fit. The caller commits or rolls back."""
    within = node_mask(engine, node)
    for d in demand.demands:
        placement = engine.place(d.request, within=within, txn=txn)
        if not placement.ok:
            reasons = placement.failures[0].reasons
            text = reasons[0].text if reasons else placement.failures[0].message
            return f"container {d.name}: {text}"
    return None


def place_on(engine: Engine, demand: PodDemand, node: str) -> tuple[Allocation, ...] | str:
    """Every container of the pod placed on ``node`` (committed), or why not (nothing changed)."""
    i = engine.state.node_index.get(node)
    if i is None:
        return f"{node}: {NOT_IN_POOL}"
    with Transaction(engine.state) as txn:
        why = place_containers(engine, demand, i, txn)
        if why is not None:
            txn.rollback()
            return f"{node}: {why}"
        placed = txn.allocations
        txn.commit()
    return placed


def fits_together(engine: Engine, demand: PodDemand, node: int) -> str | None:
    """Why the pod's containers do not fit on ``node`` together, or None. The state is left as
    it was."""
    with Transaction(engine.state) as txn:
        try:
            return place_containers(engine, demand, node, txn)
        finally:
            txn.rollback()


def engine_choice(
    engine: Engine, demand: PodDemand, asked: BoolArray, *, keep: bool = False
) -> tuple[str, tuple[Allocation, ...]] | None:
    """The node of the ``asked`` ones the engine would place a one-container pod on, with its
    allocations there (None: none holds it): a placement restricted to their cards, committed
    with ``keep`` (the caller records it), else a what-if undone at once."""
    state = engine.state
    within = state.dev_present & asked[:, None]
    with Transaction(state) as txn:
        placement = engine.place(demand.demands[0].request, within=within, txn=txn)
        if not (placement.ok and placement.allocations):
            txn.rollback()
            return None
        placed = txn.allocations
        if keep:
            txn.commit()
        else:
            txn.rollback()
    return placement.allocations[0].node, placed
