"""Preemption: which running replicas to evict so that a higher-priority replica fits, and where.

Follows kube-scheduler's default preemption, on the engine's exact per-card state:
1. Candidate nodes: nodes where the replica fails only for capacity (reasons preemption may help),
   hosting allocations of strictly lower priority.
2. On each candidate, inside a transaction, release every lower-priority allocation; if the
   replica still does not fit, the node is out. Otherwise give allocations back one by one, highest
   priority first (older first among equals), keeping each one that leaves the replica fitting:
   the evicted rest is a minimal set (no victim could be spared alone). Roll back.
3. Pick the node whose victims have the lowest highest-priority, then the fewest victims, then the
   lowest priority sum, then the node's seeded rank. Deterministic for a given state.
With ``loss`` (the work each allocation would lose, card-seconds since its job's last checkpoint:
``stop_cost.py``), the planner prefers victims that lose least: among equal priorities the one
that would lose most is reprieved first, and nodes rank by the lowest highest-priority, then the
least work lost, then the rest as above.
Because releases return exactly the shares taken, a fractional victim frees that card's memory and
compute, not node totals. Nothing changes in the state: the caller evicts, then places.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from xpupool.engine.cycle.eviction import may_evict
from xpupool.engine.engine import Engine
from xpupool.engine.pipeline import Pipeline
from xpupool.engine.reasons import PREEMPTION_MAY_HELP
from xpupool.engine.state import ClusterState
from xpupool.engine.txn import Transaction
from xpupool.model.allocation import Allocation
from xpupool.model.request import Request

Evictable = Callable[[Allocation], bool]
FitsOn = Callable[[int], bool]
Loss = Callable[[Allocation], float]
"""Card-seconds of work an allocation loses if evicted now (``stop_cost.py``)."""
"""Does the preemptor fit on this node index now? (Default: its one request passes the filters;
a front whose preemptor has several parts that must share a node places them all in a what-if.)"""


@dataclass(frozen=True, slots=True)
class PreemptionPlan:
    """Evict ``victims`` (allocation ids, lowest priority first), then place on ``node``."""

    node: str
    node_index: int
    victims: tuple[Allocation, ...]


def plan_preemption(
    engine: Engine | Pipeline,
    req: Request,
    evictable: Evictable | None = None,
    *,
    nodes: npt.NDArray[np.bool_] | None = None,
    fits_on: FitsOn | None = None,
    loss: Loss | None = None,
) -> PreemptionPlan | None:
    """The best plan for one replica of ``req``, or None when evicting cannot help.

    ``evictable`` says which allocations may go; by default those of strictly lower priority
    that are not guaranteed (``Allocation.guaranteed``; a lender reclaiming its quota passes
    "those of queues borrowing from it"). ``nodes`` limits the candidates (the Kubernetes
    front passes those kube-scheduler's own filters passed); ``fits_on`` replaces the fit check
    (see :data:`FitsOn`); ``loss`` makes the plan prefer victims that lose least (see the module
    docstring). A front passes its engine; the scheduling cycle inside the engine passes the
    pipeline."""
    pipeline = _pipeline(engine)
    state = pipeline.state
    may_go = evictable if evictable is not None else _lower_not_guaranteed(req)
    best: tuple[tuple[float, ...], PreemptionPlan] | None = None
    several_parts = fits_on is not None
    for node in _candidate_nodes(pipeline, req, may_go, nodes, several_parts):
        victims = minimal_victims(pipeline, req, node, may_go, fits_on, loss)
        if not victims:  # None: eviction cannot help; []: it fits already, no plan needed
            continue
        key: tuple[float, ...] = (
            max(v.priority for v in victims),
            len(victims),
            sum(v.priority for v in victims),
            int(state.rank[node]),
        )
        if loss is not None:
            key = (key[0], sum(loss(v) for v in victims), *key[1:])
        if best is None or key < best[0]:
            ordered = tuple(sorted(victims, key=lambda v: (v.priority, -v.id)))
            best = (key, PreemptionPlan(state.node_names[node], node, ordered))
    return None if best is None else best[1]


def _lower_not_guaranteed(req: Request) -> Evictable:
    """The default rule: strictly lower priority, and never a guaranteed job (model/qos.py)."""
    return lambda a: may_evict(a.priority, req.priority, guaranteed=a.guaranteed)


def candidate_nodes(engine: Engine | Pipeline, req: Request, evictable: Evictable) -> list[int]:
    """Node indices where ``req`` fails for capacity alone and ``evictable`` work sits: where
    freeing work may make room (the defragmentation planner, ``defrag.py``, moves work there)."""
    return _candidate_nodes(_pipeline(engine), req, evictable, None, False)


def _candidate_nodes(
    pipeline: Pipeline,
    req: Request,
    evictable: Evictable,
    nodes: npt.NDArray[np.bool_] | None,
    several_parts: bool,
) -> list[int]:
    """Nodes with evictable allocations where only capacity stands in the way."""
    state = pipeline.state
    lower = np.zeros(state.n_nodes, np.bool_)
    for node, allocations in enumerate(state.node_allocations):
        if nodes is None or nodes[node]:
            lower[node] = any(evictable(a) for a in allocations.values())
    if not lower.any():
        return []
    ctx = pipeline.context(req)
    pipeline.filter(ctx)
    blame = pipeline.blame(ctx)
    capacity_only = np.isin(blame, [int(r) for r in PREEMPTION_MAY_HELP])
    if several_parts:  # ``req`` fitting does not mean the preemptor's other parts do
        capacity_only |= ctx.node_fit
    else:
        capacity_only &= ~ctx.node_fit
    return [int(n) for n in np.flatnonzero(lower & capacity_only)]


def _fits_on(pipeline: Pipeline, req: Request, node: int) -> bool:
    ctx = pipeline.context(req)
    return bool(pipeline.filter(ctx)[node])


def minimal_victims(
    engine: Engine | Pipeline,
    req: Request,
    node: int,
    evictable: Evictable,
    fits_on: FitsOn | None = None,
    loss: Loss | None = None,
) -> list[Allocation] | None:
    """The evictable allocations of ``node`` to evict so that the preemptor fits there, none of
    which could be spared alone; None when evicting all of them is not enough. A what-if: the
    state is left as it was."""
    pipeline = _pipeline(engine)
    state: ClusterState = pipeline.state
    fits = fits_on if fits_on is not None else (lambda n: _fits_on(pipeline, req, n))
    lost = loss if loss is not None else (lambda a: 0.0)
    lower = sorted(  # reprieve the most important, then (with ``loss``) the one that loses most,
        (a for a in state.node_allocations[node].values() if evictable(a)),  # then the oldest
        key=lambda a: (-a.priority, -lost(a), a.id),
    )
    with Transaction(state) as trial:  # rolled back on leaving: the plan changes nothing
        for alloc in lower:
            trial.release(alloc.id)
        if not fits(node):
            return None
        victims = []
        for alloc in lower:
            with Transaction(state, parent=trial) as reprieve:
                reprieve.apply(alloc)
                if fits(node):
                    reprieve.commit()
                    continue
            victims.append(alloc)
        return victims


def _pipeline(engine: Engine | Pipeline) -> Pipeline:
    """The filters to plan with: a front hands its engine (it never reaches into it)."""
    return engine.pipeline if isinstance(engine, Engine) else engine
