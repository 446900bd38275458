"""The engine hosted over a changing pool: what every front holds instead of an engine.

A front (the server's control plane, the Kubernetes extender's cluster view) serves one engine over
a pool whose inventory changes: nodes register, go, change cards. Rebuilding the engine from the
node records and re-applying what is held, oldest first, beats patching columns per change
(inventory changes are rare and come in bursts). Each front once did that its own way and the
copies disagreed: only one refused an allocation on a removed node or on another node's card, and
only one judged "never fits" with the profile's disabled filters (issue 44, item 1). This host
does it once, for every front:

- :meth:`EngineHost.fresh` builds an engine over node records (cordons included); the front then
  :meth:`EngineHost.reapply` s what its owners hold, oldest first (when two claim one card, the
  one placed first keeps it), and gets back what no longer fits; each front applies its own
  rule to that (the plane requeues those jobs with an event, the extender logs and waits);
- :meth:`EngineHost.install` serves the new engine, which goes on learning the workload from
  where the engine it replaces was;
- the allocation ids of every engine built here come from one counter (:attr:`EngineHost.ids`),
  so an id never repeats for the pool however often the engine is rebuilt (``allocation_ids.py``;
  a front with a store raises it to its stored mark);
- :attr:`EngineHost.verdicts` answers "could this ever fit" for the engine served, with the
  profile's settings.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from xpupool.catalog.power import PowerModel
from xpupool.engine.allocation_ids import AllocationIds
from xpupool.engine.engine import Engine
from xpupool.engine.fragmentation import TargetWorkload
from xpupool.engine.profile import DEFAULT_PROFILE, Profile
from xpupool.engine.state import ClusterState
from xpupool.engine.verdict import Verdicts
from xpupool.model.allocation import Allocation
from xpupool.model.device import Node
from xpupool.model.errors import Conflict

__all__ = ["EngineHost", "HostedNode", "Reapplied", "Refused"]

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True, slots=True)
class HostedNode:
    """A node as a front hands it to the host: ``schedulable`` False for a cordoned (or lost)
    node, ``cordoned`` the UUIDs of its cards no new work may take (running work stays)."""

    node: Node
    schedulable: bool = True
    cordoned: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Refused(Generic[K]):
    """A charge of ``owner`` that could not be re-applied (its node or a card is gone or another
    node's, or it would over-commit): ``allocations`` as the front gave them, and why."""

    owner: K
    allocations: tuple[Allocation, ...]
    error: Conflict


@dataclass(slots=True)
class Reapplied(Generic[K]):
    """What :meth:`EngineHost.reapply` did: per owner with a charge applied, its allocations
    applied (re-addressed to the engine's slots), and the charges refused, in the order tried."""

    kept: dict[K, list[Allocation]] = field(default_factory=dict)
    refused: list[Refused[K]] = field(default_factory=list)


Restore = Callable[[K, Allocation], object]
"""Applies one re-addressed allocation of an owner (the plane's also charges its quota books);
raises Conflict when it does not fit; what it returns is not used."""


class EngineHost:
    """One pool's engine, rebuilt as the inventory changes. Not thread-safe: a front uses it under
    the lock that guards its engine."""

    def __init__(
        self,
        profile: Profile | str = DEFAULT_PROFILE,
        *,
        profiles: Mapping[str, Profile] | None = None,
        seed: int = 0,
        defer_learning: bool = False,
        workload: TargetWorkload | None = None,
    ) -> None:
        self.profile = profile
        self.profiles = profiles  # the front's: engines built later see profiles it adds
        self.seed = seed
        self.defer_learning = defer_learning
        """Engines built here re-learn their workload only when told (``Engine.relearn``): the
        front places in batches or between verbs and re-learns after."""
        self.workload = workload
        """The target workload every engine built here is given (None: they learn one online); a
        simulator replaying a trace gives its own, as ``Engine`` takes it."""
        self.ids = AllocationIds()
        """The pool's one allocation id counter: every engine built here takes its ids from it."""
        self.power: PowerModel | None = None
        """The front's power model (:meth:`use_power`), which every engine built here is given."""
        self.rebuilds = 0
        self._engine: Engine | None = None
        self._verdicts: Verdicts | None = None

    @property
    def engine(self) -> Engine | None:
        """The engine served (None before the first :meth:`install`)."""
        return self._engine

    def fresh(self, nodes: Iterable[HostedNode]) -> Engine:
        """A new engine over ``nodes`` (in that order), nothing applied, not served yet. Raises
        RequestError for a duplicate node name or card UUID."""
        records = list(nodes)
        state = ClusterState([r.node for r in records], seed=self.seed)
        for rec in records:
            if not rec.schedulable:
                state.set_node_schedulable(rec.node.name, False)
            for uuid in rec.cordoned:
                if uuid in state.uuid_slot:
                    state.set_device_cordoned(uuid, True)
        profiles = None if self.profiles is None else dict(self.profiles)
        engine = Engine(
            state,
            self.profile,
            seed=self.seed,
            profiles=profiles,
            workload=self.workload,
            ids=self.ids,
            power=self.power,
        )
        if self.defer_learning:
            engine.defer_learning()
        return engine

    def reapply(
        self,
        engine: Engine,
        charges: Iterable[tuple[K, Sequence[Allocation]]],
        restore: Restore[K] | None = None,
    ) -> Reapplied[K]:
        """Apply each charge (an owner's allocations, all or none) to ``engine``, the charge with
        the oldest allocation first, through ``restore`` (by default ``engine.restore``). A
        charge whose node or card is gone or another node's, or that would over-commit, is left
        out and returned in ``refused``; what the front does about it is the front's rule."""
        apply = restore or (lambda _owner, alloc: engine.restore(alloc))
        out: Reapplied[K] = Reapplied()
        ordered = sorted(charges, key=lambda c: min((a.id for a in c[1]), default=0))
        for owner, allocations in ordered:
            done: list[Allocation] = []
            try:
                for alloc in allocations:
                    readdressed = engine.state.readdress(alloc)
                    apply(owner, readdressed)
                    done.append(readdressed)
            except Conflict as exc:
                for alloc in done:
                    engine.release(alloc.id)
                out.refused.append(Refused(owner, tuple(allocations), exc))
                continue
            out.kept.setdefault(owner, []).extend(done)
        return out

    def apply(self, allocations: Sequence[Allocation]) -> tuple[Allocation, ...]:
        """Apply one charge to the engine served, all or none; its allocations re-addressed.
        Raises Conflict (nothing applied) when it does not fit."""
        assert self._engine is not None, "no engine served yet"
        engine = self._engine
        done: list[Allocation] = []
        try:
            for alloc in allocations:
                readdressed = engine.state.readdress(alloc)
                engine.restore(readdressed)
                done.append(readdressed)
        except Conflict:
            for alloc in done:
                engine.release(alloc.id)
            raise
        return tuple(done)

    def use_power(self, power: PowerModel) -> None:
        """The power figures the energy scorer weighs cards by, from now on: the engine served
        and every engine built later get ``power`` (a snapshot the front does not change after,
        ``PowerModel.with_overrides``)."""
        self.power = power
        if self._engine is not None:
            self._engine.power = power

    def install(self, engine: Engine) -> None:
        """Serve ``engine`` (made by :meth:`fresh`): it goes on learning the workload from where
        the engine it replaces was, so a rebuilt engine does not start cold."""
        if self._engine is not None:
            engine.inherit_learning(self._engine)
        self._engine = engine
        self.rebuilds += 1

    def rebuild(
        self,
        nodes: Iterable[HostedNode],
        charges: Iterable[tuple[K, Sequence[Allocation]]],
    ) -> Reapplied[K]:
        """:meth:`fresh`, :meth:`install`, then :meth:`reapply` every charge in the new engine."""
        engine = self.fresh(nodes)
        self.install(engine)
        return self.reapply(engine, charges)

    @property
    def verdicts(self) -> Verdicts:
        """Whether a request could ever fit this pool, judged on the engine served with the
        filters its profile (or the request's) turns off, as placing it would."""
        engine = self._engine
        assert engine is not None, "no engine served yet"
        if self._verdicts is None or self._verdicts.state is not engine.state:
            self._verdicts = Verdicts(engine.state, engine.pipeline.filters_off)
        return self._verdicts
