"""A pod's containers placed on one node, for real (bind) or as a what-if (filter, preemption).

A pod's containers must share its node; each is one engine request. Placing them all inside one
transaction answers both "do they fit together here?" (rolled back) and "take their shares"
(committed), with one code path and one failure outcome (``engine/outcomes.py`` renders it where
the extender answers kube-scheduler).

Init containers run one at a time before the app containers start (Kubernetes' order; a sidecar,
``restartPolicy: Always``, runs on beside what starts after it), so they are placed as HAMi v2.10.0
places them (``pkg/scheduler/score.go``, commit 4707fb02c91c): each init container alone, against
the node as it is (with the sidecars started before it), the app containers together (with the
sidecars); an init container and an app container may thus take the same card though the two do
not fit there at once. What the engine then holds is the pod's charge (``pod_charge.py``): per
card the larger of the two, not their sum.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from xpupool.engine import Engine, Transaction
from xpupool.engine.outcomes import ContainerDoesNotFit, NotInPool, OnNode, render
from xpupool.engine.state import BoolArray
from xpupool.k8s.codec.pod_charge import Role, charge
from xpupool.k8s.codec.pod_request import PodDemand
from xpupool.model.allocation import Allocation, DeviceShare
from xpupool.model.request import Request

NOT_IN_POOL = render(NotInPool())


@dataclass(frozen=True, slots=True)
class PodPlacement:
    """A pod's containers placed on one node. ``placed`` has one allocation per container of its
    demand (``PodDemand.demands``: its cards and shares, what the bind writes on the pod);
    ``charge`` is what the engine holds for them (``pod_charge.py``), the same allocations when
    the pod has no init container that asks for devices."""

    placed: tuple[Allocation, ...]
    charge: tuple[Allocation, ...]


def node_mask(engine: Engine, node: int) -> np.ndarray:
    """The devices of one node: what a placement ``within`` it may use."""
    return engine.node_devices(node)


def place_containers(
    engine: Engine,
    demand: PodDemand,
    node: int,
    txn: Transaction,
    first: Allocation | None = None,
) -> PodPlacement | ContainerDoesNotFit:
    """Place every container of the pod on ``node`` inside ``txn``, init containers each alone
    (see the module docstring), and leave the pod's charge applied there; or why not (the
    container that does not fit, and the engine's reason). ``first``: the first container's
    allocation, already applied in ``txn`` (a gang placed it with its copies). The caller
    commits or rolls back."""
    within = node_mask(engine, node)
    placed: list[Allocation] = []
    with engine.transaction(txn) as pod:
        for k, d in enumerate(demand.demands):
            if k == 0 and first is not None:
                if d.role is Role.INIT:  # it runs alone: not beside the containers after it
                    pod.release(first.id)
                placed.append(first)
                continue
            if d.role is Role.INIT:  # alone, then undone: what it took is not beside the rest
                with engine.transaction(pod) as alone:
                    placement = engine.place(d.request, within=within, txn=alone)
                    alone.rollback()
                if placement.ok:  # the engine learns of it when the pod commits, all the same
                    pod.on_commit(_learn(engine, d.request))
            else:
                placement = engine.place(d.request, within=within, txn=pod)
            if not placement.ok:
                return ContainerDoesNotFit(d.name, placement.failures[0])
            placed.append(placement.allocations[0])
        charged = _charge(engine, demand, placed, pod)
        pod.commit()
    return PodPlacement(tuple(placed), charged)


def _learn(engine: Engine, req: Request) -> Callable[[], None]:
    """Tell the engine's learners, on commit, that ``req`` was placed."""
    return lambda: engine.observe(req, True)


def _charge(
    engine: Engine, demand: PodDemand, placed: list[Allocation], txn: Transaction
) -> tuple[Allocation, ...]:
    """Turn the running containers' allocations (applied in ``txn``; init containers' are not)
    into the pod's charge: a running container's allocation grows by the init containers'
    excess on its cards, and the init containers hold an allocation of their own on the cards
    where they need a task beside the running ones. New allocations take new ids."""
    roles = [d.role for d in demand.demands]
    shares = [[(s.uuid, s.memory_mib, s.core_permille) for s in a.devices] for a in placed]
    slots = {s.uuid: s.slot for a in placed for s in a.devices}
    out: list[Allocation] = []
    for part in charge(shares, roles, init_done=False):
        devices = tuple(DeviceShare(u, slots[u], m, c) for u, m, c in part.shares)
        if part.container is not None and devices == placed[part.container].devices:
            out.append(placed[part.container])
            continue
        if part.container is None:  # the init containers' own: named after the first of them
            base = next(a for a, r in zip(placed, roles, strict=True) if r is Role.INIT)
        else:
            base = placed[part.container]
            txn.release(base.id)
        cpu = base.cpu_milli if part.container is not None else 0
        mem = base.memory_mib if part.container is not None else 0
        grown = replace(base, id=engine.ids.take(), cpu_milli=cpu, memory_mib=mem, devices=devices)
        txn.apply(grown)
        out.append(grown)
    return tuple(out)


def place_on(engine: Engine, demand: PodDemand, node: str) -> PodPlacement | OnNode:
    """Every container of the pod placed on ``node`` (its charge committed), or why not (nothing
    changed)."""
    i = engine.node_index(node)
    if i is None:
        return OnNode(node, NotInPool())
    with engine.transaction() as txn:
        placed = place_containers(engine, demand, i, txn)
        if isinstance(placed, ContainerDoesNotFit):
            txn.rollback()
            return OnNode(node, placed)
        txn.commit()
    return placed


def fits_together(engine: Engine, demand: PodDemand, node: int) -> ContainerDoesNotFit | None:
    """Why the pod's containers do not fit on ``node`` together, or None. The state is left as
    it was."""
    with engine.transaction() as txn:
        try:
            placed = place_containers(engine, demand, node, txn)
            return placed if isinstance(placed, ContainerDoesNotFit) else None
        finally:
            txn.rollback()


def engine_choice(
    engine: Engine, demand: PodDemand, asked: BoolArray, *, keep: bool = False
) -> tuple[str, tuple[Allocation, ...]] | None:
    """The node of the ``asked`` ones the engine would place a one-container pod on, with its
    allocations there (None: none holds it): a placement restricted to their cards, committed
    with ``keep`` (the caller records it), else a what-if undone at once."""
    within = engine.devices_on(asked)
    with engine.transaction() as txn:
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
