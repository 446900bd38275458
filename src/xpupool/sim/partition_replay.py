"""The FGD protocol on a pool of MIG-capable cards, some in partition mode, re-cut as tasks need.

The Alibaba trace's cards have no MIG, so :func:`mig_pool` gives every node cards of a
MIG-capable model (a seeded share of the nodes per model of the mix) and puts a seeded share of
the nodes in partition mode. A task is then asked for as one or two requests, tried in order
(:func:`task_requests`): a fractional task takes the smallest profile with at least
``ceil(gpu_milli * slices / 1000)`` compute slices (issue 53), else a software share on a card not
in partition mode; a whole-card task takes whole cards, else the full-card profile on as many
instances. What a card in partition mode holds at first is the policy's (:class:`CutPolicy`):
nothing for the re-cutting rules, a fixed layout for static partitions (as KAI's static MIG). When
a partition request fits nowhere and the policy has a rule, :func:`propose_recut` asks the rule
which cards to cut and the engine host rebuilds the engine on the new layouts with what is placed
applied again (``EngineHost.rebuild``, the path every front takes when a node's devices change),
then the request is placed again. A re-cut is one card's layout changing; destroyed counts the
free instances it removed. Placed demand is what the task asked for (its ``gpu_milli``), so what a
partition larger than its task leaves unused is unallocated: the price of isolation.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from xpupool.catalog.accelerators import load_accelerators
from xpupool.catalog.partition_cards import cut_card
from xpupool.catalog.partition_geometry import Instance, Layout
from xpupool.catalog.partitions import PartitionScheme, load_partitions
from xpupool.engine import Profile
from xpupool.engine.fragmentation import TargetWorkload, kernels
from xpupool.engine.host import EngineHost, HostedNode
from xpupool.engine.recut_proposal import PartitionCard, Recut, RecutRule, propose_recut
from xpupool.model import Allocation, Device, DeviceRequest, Node, Request
from xpupool.sim.alibaba import GPU_MILLI, TraceTask, capacity_milli, to_request


@dataclass(frozen=True, slots=True)
class MigPool:
    """Nodes with MIG-capable whole cards, and which cards are in partition mode."""

    nodes: tuple[Node, ...]
    partitioned: frozenset[str]  # card UUIDs
    schemes: dict[str, PartitionScheme]  # card UUID -> its scheme, for the cards partitioned

    @property
    def scheme(self) -> PartitionScheme:
        """The scheme tasks are mapped to profiles by (the mix's models share profile names)."""
        return next(iter(self.schemes.values()))


def mig_pool(
    nodes: Sequence[Node], mix: Sequence[tuple[str, float]], partitioned: float, seed: int
) -> MigPool:
    """``nodes`` with each card replaced by one of ``mix``'s models (``(model, share)``; a node's
    cards all one model, nodes assigned in a seeded order) and ``partitioned`` of the nodes with
    cards in partition mode (seeded). Raises ValueError for a model with no partitions."""
    catalog, partitions = load_accelerators(), load_partitions()
    rng = np.random.default_rng(seed)
    with_cards = [i for i, n in enumerate(nodes) if n.devices]
    order = [with_cards[i] for i in rng.permutation(len(with_cards))]
    bounds = np.cumsum([share for _, share in mix]) / sum(share for _, share in mix)
    model_of: dict[int, str] = {}
    for rank, i in enumerate(order):
        at = int(np.searchsorted(bounds, (rank + 0.5) / len(order)))
        model_of[i] = mix[min(at, len(mix) - 1)][0]
    cut_nodes = {order[i] for i in rng.permutation(len(order))[: round(partitioned * len(order))]}
    out: list[Node] = []
    cut: set[str] = set()
    schemes: dict[str, PartitionScheme] = {}
    for i, node in enumerate(nodes):
        if i not in model_of:
            out.append(node)
            continue
        model = catalog.lookup(model_of[i])
        scheme = partitions.scheme_for(model_of[i], "nvidia", catalog)
        if model is None or scheme is None:
            raise ValueError(f"{model_of[i]} has no hardware partitions")
        cards = tuple(
            Device(d.uuid, "nvidia", model.name, int(model.memory_gib * 1024), index=d.index)
            for d in node.devices
        )
        out.append(replace(node, devices=cards))
        if i in cut_nodes:
            cut.update(d.uuid for d in cards)
            schemes.update((d.uuid, scheme) for d in cards)
    if not schemes:  # no card partitioned: the first model's scheme still maps tasks
        first = partitions.scheme_for(mix[0][0], "nvidia", catalog)
        if first is None:
            raise ValueError(f"{mix[0][0]} has no hardware partitions")
        schemes[""] = first
    return MigPool(tuple(out), frozenset(cut), schemes)


def profile_for(scheme: PartitionScheme, gpu_milli: int) -> str:
    """The smallest profile (fewest compute slices, then least memory, no ``+me``) with at least
    ``ceil(gpu_milli * compute_slices / 1000)`` compute slices."""
    need = math.ceil(gpu_milli * scheme.compute_slices / GPU_MILLI)
    fitting = [p for p in scheme.profiles if p.compute >= need and not p.media]
    return min(fitting, key=lambda p: (p.compute, p.memory_mib)).name


def task_requests(task: TraceTask, scheme: PartitionScheme | None) -> tuple[Request, ...]:
    """The requests a task tries in order (see the module docstring); ``scheme`` None: the pool
    has no card in partition mode, a share or whole cards as today. The trace's model names
    are dropped: its cards are replaced."""
    share = to_request(replace(task, gpu_spec=()))
    if scheme is None or task.num_gpu == 0:
        return (share,)
    if task.gpu_milli < GPU_MILLI:
        isolated = DeviceRequest(count=1, partition=profile_for(scheme, task.gpu_milli))
    else:
        full = profile_for(scheme, GPU_MILLI)
        isolated = DeviceRequest(count=task.num_gpu, partition=full)
    cut = Request(task.name, task.cpu_milli, task.memory_mib, isolated)
    return (cut, share) if task.gpu_milli < GPU_MILLI else (share, cut)


@dataclass(frozen=True, slots=True)
class CutPolicy:
    """How cards in partition mode are cut: ``static`` their layout from the start (None: uncut),
    ``rule`` the re-cut rule (None: never re-cut)."""

    name: str
    static: Layout | None = None
    rule: RecutRule | None = None


@dataclass(frozen=True, slots=True)
class PartitionRun:
    """One replay: at the task where arrived demand first reached capacity (else the last),
    ``unallocated_pct`` = 100 - placed / capacity; re-cuts and instances destroyed in all."""

    policy: str
    unallocated_pct: float
    failed: int
    recuts: int
    destroyed: int
    seconds: float


class PartitionCards:
    """The layouts of the cards in partition mode, and the node records built from them (a
    node's record built again only when one of its cards is re-cut)."""

    def __init__(self, pool: MigPool, layouts: dict[str, Layout]) -> None:
        self.pool = pool
        self.layouts = layouts
        self.owner: dict[str, tuple[str, Instance]] = {}  # instance UUID -> (card, instance)
        self._records = {n.name: self._record(n) for n in pool.nodes}
        self._cards = {
            d.uuid: PartitionCard(node.name, d.uuid, pool.schemes[d.uuid], layouts[d.uuid])
            for node in pool.nodes
            for d in node.devices
            if d.uuid in layouts
        }

    def hold(self, allocations: Sequence[Allocation]) -> None:
        """Mark the instances ``allocations`` take busy."""
        self._mark(allocations, busy=True)

    def release(self, allocations: Sequence[Allocation]) -> None:
        """Mark the instances ``allocations`` took free again (their task left)."""
        self._mark(allocations, busy=False)

    def _mark(self, allocations: Sequence[Allocation], busy: bool) -> None:
        for alloc in allocations:
            for share in alloc.devices:
                if share.uuid in self.owner:
                    uuid, instance = self.owner[share.uuid]
                    card = self._cards[uuid]
                    held = card.busy | {instance} if busy else card.busy - {instance}
                    self._cards[uuid] = replace(card, busy=held)

    def cards(self) -> list[PartitionCard]:
        """Every card in partition mode, in pool order, with its busy instances."""
        return list(self._cards.values())

    def recut(self, changes: Sequence[Recut]) -> list[HostedNode]:
        """Apply ``changes``; the records of every node, those of the changed nodes rebuilt."""
        for change in changes:
            self.layouts[change.uuid] = change.layout
            self._cards[change.uuid] = replace(self._cards[change.uuid], layout=change.layout)
        for node in self.pool.nodes:
            if any(c.node == node.name for c in changes):
                self._records[node.name] = self._record(node)
        return self.records()

    def records(self) -> list[HostedNode]:
        return [self._records[n.name] for n in self.pool.nodes]

    def _record(self, node: Node) -> HostedNode:
        catalog, partitions = load_accelerators(), load_partitions()
        devices: list[Device] = []
        for card in node.devices:
            layout = self.layouts.get(card.uuid)
            if layout is None:
                devices.append(card)
                continue
            cut = cut_card(card, layout, partitions, catalog) if layout else ()
            for dev, instance in zip(cut, layout, strict=True):
                self.owner[dev.uuid] = (card.uuid, instance)
            devices.extend(cut)
        return HostedNode(replace(node, devices=tuple(devices)))


def partition_replay(
    pool: MigPool,
    tasks: Sequence[TraceTask],
    policy: Profile | str,
    cutting: CutPolicy,
    seed: int,
    workload: TargetWorkload,
) -> PartitionRun:
    """Place ``tasks`` in order (no departures, no retries) on ``pool`` with the engine ``policy``
    and the cut policy ``cutting``; see the module docstring."""
    kernels.warm()
    started = time.perf_counter()
    scheme = pool.scheme if pool.partitioned else None
    cards = PartitionCards(pool, dict.fromkeys(pool.partitioned, cutting.static or ()))
    host = EngineHost(policy, seed=seed, workload=workload)
    host.install(host.fresh(cards.records()))
    held: dict[int, tuple[Allocation, ...]] = {}
    capacity = capacity_milli(pool.nodes)
    arrived = placed = failed = recuts = destroyed = 0
    at_full: int | None = None
    for t, task in enumerate(tasks):
        arrived += task.gpu_request_milli
        ok = False
        for req in task_requests(task, scheme):
            engine = host.engine
            assert engine is not None
            found = engine.place(req)
            if not found.ok and cutting.rule is not None:
                changes = propose_recut(engine, cards.cards(), req, cutting.rule)
                if changes:
                    destroyed += sum(change.destroyed for change in changes)
                    recuts += len(changes)
                    done = host.rebuild(cards.recut(changes), list(held.items()))
                    assert not done.refused, "a re-cut kept every busy instance"
                    held.update({k: tuple(v) for k, v in done.kept.items()})
                    engine = host.engine
                    assert engine is not None
                    found = engine.place(req)
            if found.ok:
                held[t] = tuple(found.allocations)
                cards.hold(found.allocations)
                ok = True
                break
        if ok:
            placed += task.gpu_request_milli
        else:
            failed += 1
        if at_full is None and arrived >= capacity:
            at_full = placed
    final = placed if at_full is None else at_full
    return PartitionRun(
        cutting.name,
        round(100.0 - 100.0 * final / capacity, 3) if capacity else 0.0,
        failed,
        recuts,
        destroyed,
        time.perf_counter() - started,
    )
