"""The engine: place requests on a cluster state, release them, explain refusals.

This is the one entry point the simulator, the server and the Kubernetes extender drive. It does no
I/O. A request's replicas are placed one at a time inside a transaction: with ``gang`` any failure
rolls every replica back, and the replicas stay in one site unless the request lets them span sites
(``gang_sites.py``); without it each replica stands alone, goes wherever it fits, and failures are
reported per replica.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import cast

import numpy as np

from xpupool.catalog import AcceleratorCatalog
from xpupool.catalog.power import PowerModel
from xpupool.engine.allocation_ids import AllocationIds
from xpupool.engine.context import Context
from xpupool.engine.device_pick import pick_devices
from xpupool.engine.fragmentation.after import AfterPlacement
from xpupool.engine.fragmentation.cache import FragmentationCache
from xpupool.engine.fragmentation.measure import ShapeTable, TargetWorkload
from xpupool.engine.fragmentation.stranded import Stranded, stranded_capacity
from xpupool.engine.fragmentation.workload_model import NAME as WORKLOAD
from xpupool.engine.fragmentation.workload_model import WorkloadArgs, WorkloadModel
from xpupool.engine.gang_bound import Room, gang_refusal, gang_room
from xpupool.engine.gang_sites import (
    domain_rooms,
    domain_word,
    keeps_to_one_site,
    no_site_refusal,
    within_domains,
)
from xpupool.engine.pipeline import Pipeline
from xpupool.engine.profile import BUILTIN_PROFILES, DEFAULT_PROFILE, Profile, known_profile
from xpupool.engine.reasons import Reason, Unschedulable
from xpupool.engine.registry import POST_SCORERS, SCORERS, WORKLOAD_PLUGINS
from xpupool.engine.scorers.base import (
    Describing,
    DevicePicker,
    Observer,
    PluginArgs,
    PostScorer,
    Preference,
    Scorer,
    ScorerEnv,
)
from xpupool.engine.scorers.fgd import Fgd
from xpupool.engine.state import BoolArray, ClusterState, FloatArray, IntArray
from xpupool.engine.txn import Transaction
from xpupool.model.allocation import Allocation, DeviceShare
from xpupool.model.device import Device
from xpupool.model.qos import may_be_preempted
from xpupool.model.request import Request


@dataclass(frozen=True, slots=True)
class _Scoring:
    """A profile's scorers built once: without its preference scorers (``plain``, what a request
    that asks for none of them is scored with) and with them (``preferring``)."""

    plain: tuple[tuple[Scorer, float], ...]
    preferring: tuple[tuple[Scorer, float], ...]
    preferences: tuple[Preference, ...]


@dataclass(frozen=True, slots=True)
class Placement:
    """The outcome of :meth:`Engine.place`: what was allocated and, per failed replica, why not."""

    request: Request
    allocations: tuple[Allocation, ...]
    failures: tuple[Unschedulable, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.failures


class Engine:
    """Places requests on ``state`` with ``profile`` (a built-in name or a :class:`Profile`).

    Deterministic: the same state, request sequence, profile and ``seed`` give the same placements.
    Allocation ids come from ``ids``: a front that rebuilds its engine passes the same counter to
    each, so that no id is handed out twice (``allocation_ids.py``); by default a new one.
    """

    def __init__(
        self,
        state: ClusterState,
        profile: Profile | str = DEFAULT_PROFILE,
        *,
        seed: int = 0,
        profiles: dict[str, Profile] | None = None,
        workload: TargetWorkload | None = None,
        ids: AllocationIds | None = None,
        power: PowerModel | None = None,
    ) -> None:
        self.state = state
        self.power = power
        """The front's power model (``catalog/power.py``: the operator's figures, the idle watts
        measured on the pool), which the energy scorer reads; None: the catalog's figures. A
        front replaces it (never changes it in place) as it learns."""
        self.ids = AllocationIds() if ids is None else ids
        self.seed = seed
        self.workload = workload
        self.profiles = dict(BUILTIN_PROFILES if profiles is None else profiles)
        if isinstance(profile, Profile):
            self.profiles[profile.name] = profile
        self.profile = self._profile(profile.name if isinstance(profile, Profile) else profile)
        self.pipeline = Pipeline(state)
        self.pipeline.filters_off = self._filters_off
        self._scorers: dict[tuple[str, PluginArgs | None, PluginArgs | None], Scorer] = {}
        self._post_plugins: dict[tuple[str, PluginArgs | None, PluginArgs | None], PostScorer] = {}
        self._models: dict[PluginArgs | None, WorkloadModel] = {}
        self._inherited: dict[PluginArgs | None, tuple[Request, ...]] = {}
        self._learning_deferred = False
        self._weighted_cache: dict[str, _Scoring] = {}
        self._observers: dict[str, tuple[Observer, ...]] = {}
        self._post: dict[str, tuple[PostScorer, ...]] = {}
        self._pickers: dict[str, DevicePicker | None] = {}

    # ------------------------------------------------------------------ public
    def place(
        self, req: Request, within: BoolArray | None = None, txn: Transaction | None = None
    ) -> Placement:
        """Place every replica of ``req`` and commit; see the module docstring for gang semantics.

        ``within`` (``[N, W]``) restricts the devices further, e.g. to an admitted quota flavour;
        a refusal then counts nodes whose devices lie outside it (``Reason.OUTSIDE_ASSIGNMENT``).
        Inside ``txn`` (a what-if) the placement commits into it and goes when it rolls back.
        The profile's observers (``scorers/base.py`` :class:`Observer`: its scorers that learn
        and the shared workload model its plugins build on) are told the outcome once each; inside
        ``txn``, when the outermost transaction commits (a front that places in transactions, as
        the Kubernetes extender does, teaches what it keeps), and never when it rolls back: a
        what-if is not a request to learn from.
        """
        profile = self._profile(req.node_policy) if req.node_policy else self.profile
        placement = self._place_all(req, profile, within, txn)
        if txn is None:
            self._observe(req, profile, placement.ok)
        else:
            txn.on_commit(lambda: self._observe(req, profile, placement.ok))
        return placement

    def observe(self, req: Request, placed: bool) -> None:
        """Tell the learners of ``req``'s profile how a request decided outside :meth:`place`
        went: a front that tries requests in what-ifs and refuses one when none holds it (the
        Kubernetes extender, when no node holds a pod) teaches the refusal, as a refused
        :meth:`place` does."""
        profile = self._profile(req.node_policy) if req.node_policy else self.profile
        self._observe(req, profile, placed)

    def _observe(self, req: Request, profile: Profile, placed: bool) -> None:
        observers = self._observers.get(profile.name)
        if observers is None:
            weighted = self._weighted(profile)
            learners: list[Observer] = [s for s, _ in weighted if isinstance(s, Observer)]
            if profile.uses_workload_model:
                learners.append(self._model(profile))
            observers = self._observers[profile.name] = tuple(learners)
        for observer in observers:
            observer.observe(req, placed)

    def _place_all(
        self,
        req: Request,
        profile: Profile,
        within: BoolArray | None,
        txn: Transaction | None,
    ) -> Placement:
        if req.gang and req.replicas > 1:
            room = gang_room(self.pipeline, req, within)
            refused = gang_refusal(self.pipeline, req, within, room)  # more than could fit now
            if refused is not None:
                return Placement(req, (), (refused,))
            if room.fit.any() and keeps_to_one_site(self.state, req):
                return self._place_in_one_site(req, profile, within, txn, room)
        return self._place_replicas(req, profile, within, txn)[0]

    def _place_in_one_site(
        self,
        req: Request,
        profile: Profile,
        within: BoolArray | None,
        txn: Transaction | None,
        room: Room,
    ) -> Placement:
        """Gang ``req`` wholly within one of the domains (sites, or a site's link domains:
        ``gang_sites.py``) that could take it all now (``room`` summed per domain): the first
        replica picks the domain where the profile scores it best, the others follow it there.
        A domain that fails a later replica (the bound counts cards, not link groups) is rolled
        back and the next choice tried; the refusal is then the first domain's."""
        rooms = domain_rooms(self.state, room)
        keys = self.state.link_domains.keys
        domains = [k for k, n in zip(keys, rooms.tolist(), strict=True) if n >= req.replicas]
        if not domains:
            return Placement(req, (), (no_site_refusal(self.pipeline, req, within, room, rooms),))
        refused: Placement | None = None
        while domains:
            placement, domain = self._place_replicas(req, profile, within, txn, domains)
            if placement.ok:
                return placement
            refused = refused or placement
            if domain is None:  # its first replica fit none of them (not after the bound)
                break
            domains.remove(domain)
        assert refused is not None
        return refused

    def _place_replicas(
        self,
        req: Request,
        profile: Profile,
        within: BoolArray | None,
        txn: Transaction | None,
        domains: Sequence[str] = (),
    ) -> tuple[Placement, str | None]:
        """Place ``req``'s replicas one by one in a transaction inside ``txn``: a gang's first
        failure rolls them all back, other replicas fail alone. With ``domains`` (a gang kept to
        one site or link domain), the first replica goes to one of them and the others to its
        domain, whose key is returned beside the placement."""
        state = self.state
        each = within_domains(state, req, domains) if domains else req
        domain: str | None = None
        with Transaction(state, parent=txn) as inner:
            failures: list[Unschedulable] = []
            for replica in range(req.replicas):
                result = self._place_one(each, replica, profile, inner, within)
                if isinstance(result, Unschedulable):
                    if req.gang:
                        where = "" if domain is None else f" in {domain_word(state)} {domain}"
                        note = f"gang: replica {replica + 1} of {req.replicas} fits nowhere{where}"
                        failure = Unschedulable(result.total_nodes, result.reasons, replica, note)
                        inner.rollback()
                        return Placement(req, (), (failure,)), domain
                    failures.append(result)
                elif domains and domain is None:
                    domain = state.link_domains.key_of(result.node_index)
                    each = within_domains(state, req, (domain,))
            allocations = inner.allocations
            inner.commit()
        return Placement(req, allocations, tuple(failures)), domain

    def explain(self, req: Request) -> Unschedulable | None:
        """Why one replica of ``req`` fits nowhere right now, or None if it fits. Changes nothing."""
        ctx = self.feasible(req)
        return None if ctx.node_fit.any() else self.pipeline.explain(ctx)

    def feasible(self, req: Request) -> Context:
        """Filter only (for fronts that score or bind elsewhere): ``ctx.node_fit`` is the answer."""
        ctx = self.pipeline.context(req)
        self.pipeline.filter(ctx)
        return ctx

    def transaction(self, parent: Transaction | None = None) -> Transaction:
        """A what-if on this engine's state (nested in ``parent``): what is placed or released
        inside goes again when it rolls back."""
        return Transaction(self.state, parent)

    def set_node_schedulable(self, name: str, schedulable: bool) -> None:
        """Cordon (False) or uncordon (True) node ``name``; what runs there stays."""
        self.state.set_node_schedulable(name, schedulable)

    def set_device_cordoned(self, uuid: str, cordoned: bool) -> None:
        """Whether new work may take card ``uuid`` (False) or not (True); what runs stays."""
        self.state.set_device_cordoned(uuid, cordoned)

    def node_reasons(self, ctx: Context) -> tuple[list[tuple[Reason, str]], IntArray]:
        """Per node, why ``ctx`` (from :meth:`feasible`) fails there: ``(labels, blame)``, where
        ``blame[n]`` indexes ``labels`` (``(reason, detail)``; index 0 is ``Reason.FITS``). For
        fronts that answer per node, as a scheduler extender's ``FailedNodes`` does."""
        return self.pipeline.node_reasons(ctx)

    def filters_off(self, req: Request) -> frozenset[str]:
        """The filters ``req``'s profile (else the engine's) turns off: a front that checks a
        request's names against the pool skips what its profile does not look at."""
        return self._filters_off(req)

    def shape_table(self, workload: TargetWorkload) -> ShapeTable:
        """Which shapes of ``workload`` fit each node now, judged by this engine's filters (the
        measure of stranded capacity a front reports for a workload of its own)."""
        return ShapeTable(self.state, self.pipeline, workload)

    def fragmentation_cache(self, workload: TargetWorkload) -> FragmentationCache:
        """The fragmentation measure of ``workload`` kept current per node on this engine's
        state and filters (the simulator's series)."""
        return FragmentationCache(self.state, self.pipeline, workload)

    def placement_measure(self) -> AfterPlacement | None:
        """The fragmentation measure this engine's profile places by (its workload model's, the
        workload given or learned), with its cache of fragmentation after placement, which
        placing shares: a what-if that reads it (the site choice) reuses what placements
        computed, and they what it computed. None when the profile uses no workload model, or
        it knows no shape yet. Read it at each use: a re-learned workload replaces it."""
        if not self.profile.uses_workload_model:
            return None
        after = self._model(self.profile).after
        return after if after.frag.workload.shapes else None

    def rate(self, req: Request, policy: str | None = None) -> tuple[BoolArray, FloatArray]:
        """Filter and score one replica without placing it: ``(fits [N], weighted score [N])``.

        For fronts that choose elsewhere (a scheduler extender's prioritize call); ``policy`` names
        a profile, default the request's or the engine's. Scores of non-fitting nodes are meaningless.
        """
        name = policy or req.node_policy
        profile = self._profile(name) if name else self.profile
        ctx = self.pipeline.context(req)
        ctx.filters_off = profile.disabled_filters
        self.pipeline.filter(ctx)
        candidates = ctx.candidates()
        total = self.pipeline.weighted(ctx, self._weighted(profile, req), candidates)
        return ctx.node_fit, np.zeros(self.state.n_nodes) if total is None else total

    def release(self, alloc: Allocation | int) -> Allocation:
        """Give back exactly what an allocation took (by object or id). Raises Conflict if unknown."""
        return self.state.revert(alloc if isinstance(alloc, int) else alloc.id)

    def stranded(self) -> Stranded | None:
        """Idle device capacity that no shape of the target workload can use now, per node
        (``fragmentation.stranded_capacity``): the workload a scorer keeps (given, or learned from
        the requests by xpupool's workload model), else the one given to the engine; None when
        there is none yet. For a front whose only workload is what it placed (the Kubernetes
        extender's gauges). The embedded server measures for the pending and common shapes
        instead (``server/services/overview.py`` ``stranded_now``), so its figure does not hang
        on what the scheduler happened to learn: same measure, another target workload
        (docs/capacity.md says which front reports which)."""
        table: ShapeTable | None = None
        kept = [s.frag for s in self._scorers.values() if isinstance(s, Fgd)]
        for frag in [*kept, *(m.frag for m in self._models.values())][:1]:
            frag.current()  # its table rebuilt after an inventory change
            table = frag.table
        if table is None and self.workload is not None:
            table = ShapeTable(self.state, self.pipeline, self.workload)
        if table is None or table.weights.size == 0:
            return None
        return stranded_capacity(self.state, table)

    def target_workload(self) -> TargetWorkload | None:
        """The workload placements are weighed against, as :meth:`stranded` reads it: the one a
        scorer keeps (given, or learned from the requests), else the one given to the engine;
        None when there is none yet. What a front's re-cut choice weighs layouts by
        (``server/plane/auto_recut.py``)."""
        kept = [s.frag for s in self._scorers.values() if isinstance(s, Fgd)]
        for frag in [*kept, *(m.frag for m in self._models.values())][:1]:
            return frag.workload
        return self.workload

    def notes(self) -> list[str]:
        """What the scorers built so far use and chose for themselves (xpupool's resolution, its
        lookahead and where its workload came from, told by its workload model), for reports."""
        notes = [s.describe() for s in self._scorers.values() if isinstance(s, Describing)]
        return notes + [m.describe() for m in self._models.values()]

    def restore(self, alloc: Allocation) -> None:
        """Re-apply an allocation recorded earlier (a server restarting from its store); its id
        is never handed out again."""
        self.state.apply(alloc)
        self.ids.seen(alloc.id)

    # ---------------------------------------------------- what the fronts look up by name
    # Fronts ask these instead of reading ``state``'s columns (issue 44 part 1), so that the
    # columns can change without touching a front; tests/unit/engine/test_engine_boundary.py
    # keeps it so.

    def node_index(self, name: str) -> int | None:
        """The engine's index of node ``name`` (None: not in the pool)."""
        return self.state.node_index.get(name)

    def nodes_named(self, names: Iterable[str]) -> BoolArray:
        """``[N]`` the nodes of ``names`` that are in the pool (a name not in it is skipped)."""
        mask = np.zeros(self.state.n_nodes, np.bool_)
        index = self.state.node_index
        mask[[index[n] for n in names if n in index]] = True
        return mask

    def devices_on(self, nodes: BoolArray) -> BoolArray:
        """``[N, W]`` the devices of the ``nodes`` mask: what a placement ``within`` them may use."""
        return self.state.dev_present & nodes[:, None]

    def node_devices(self, node: int) -> BoolArray:
        """``[N, W]`` the devices of the node at index ``node`` alone."""
        within = np.zeros_like(self.state.dev_present)
        within[node] = self.state.dev_present[node]
        return within

    def device(self, uuid: str) -> tuple[str, Device] | None:
        """The node (by name) that has device ``uuid``, and the device (None: no node has it)."""
        slot = self.state.uuid_slot.get(uuid)
        if slot is None:
            return None
        node, col = divmod(slot, self.state.width)
        return self.state.node_names[node], self.state.nodes[node].devices[col]

    def is_live(self, alloc_id: int) -> bool:
        """Whether allocation ``alloc_id`` holds its devices in this engine."""
        return alloc_id in self.state.live

    def sites(self) -> list[str]:
        """The sites of the pool's nodes, in the order the nodes named them."""
        return list(self.state.sites)

    @property
    def catalog(self) -> AcceleratorCatalog:
        """The card catalog the engine reads its cards with (names, aliases, sizes): fronts check
        a request's names against the same one."""
        return self.state.catalog

    def knows_model(self, name: str) -> bool:
        """Whether ``name`` names a card model: one the catalog knows, or one of the pool's
        (its printed name, or an alias of it)."""
        catalog = self.state.catalog
        return catalog.knows(name) or any(
            catalog.matches(name, printed, vendor) for vendor, printed in self.state.models
        )

    def model_names(self) -> list[str]:
        """Every card model name :meth:`knows_model` knows by its own name: the catalog's, then
        the pool's printed ones (for a "did you mean" hint)."""
        return [m.name for m in self.state.catalog.models] + [p for _, p in self.state.models]

    def pool_models(self) -> tuple[tuple[str, str], ...]:
        """(vendor, printed model) of each card model the pool has had, by model id."""
        return tuple(self.state.models)

    def live_nodes(self) -> list[tuple[int, str, str]]:
        """(index, name, site) of each node that is up, in index order: the rows of per-node
        figures such as :meth:`stranded`'s."""
        state = self.state
        return [
            (i, name, state.nodes[i].site)
            for i, name in enumerate(state.node_names)
            if state.node_alive[i]
        ]

    # ------------------------------------------------------------------ internals
    def _place_one(
        self,
        req: Request,
        replica: int,
        profile: Profile,
        txn: Transaction,
        within: BoolArray | None = None,
    ) -> Allocation | Unschedulable:
        ctx = self.pipeline.context(req)
        ctx.within = within
        self.pipeline.filter(ctx)
        plain = self._weighted(profile)
        scorers = self._weighted(profile, req)
        post = self._post_steps(profile) if scorers is plain else ()  # see Preference
        node = self.pipeline.choose(ctx, scorers, post)
        if node < 0:
            return self.pipeline.explain(ctx)
        alloc = self._allocation(ctx, node, replica, profile)
        txn.apply(alloc)
        return alloc

    def _allocation(
        self,
        ctx: Context,
        node: int,
        replica: int,
        profile: Profile,
    ) -> Allocation:
        s, req = self.state, ctx.req
        shares: tuple[DeviceShare, ...] = ()
        if ctx.k:
            columns = self._pick(ctx, node, profile, self._weighted(profile))
            shares = tuple(
                DeviceShare(
                    uuid=s.slot_uuid[node * s.width + col],
                    slot=node * s.width + col,
                    memory_mib=ctx.need_mib
                    if isinstance(ctx.need_mib, int)
                    else int(ctx.need_mib[node, col]),
                    core_permille=ctx.need_core,
                )
                for col in columns
            )
        alloc = Allocation(
            id=self.ids.take(),
            request_name=req.name,
            replica=replica,
            node=s.node_names[node],
            node_index=node,
            cpu_milli=req.cpu_milli,
            memory_mib=req.memory_mib,
            devices=shares,
            priority=req.priority,
            guaranteed=not may_be_preempted(req.qos),
        )
        return alloc

    def _pick(
        self, ctx: Context, node: int, profile: Profile, scorers: tuple[tuple[Scorer, float], ...]
    ) -> list[int]:
        """The request's device policy if it names one; else, for a one-card replica, the card the
        profile's card scorers chose (``card_scores.py``); else the choice of the heaviest scorer
        that picks devices, when it makes one (FGD picks the GPU it scored); else the profile's
        device policy."""
        if ctx.req.device_policy is None and scorers:
            if ctx.k == 1:
                if ctx.cards is None:  # one node fitted: nothing was scored, the card matters
                    self.pipeline.card_scores.choose(ctx, scorers, np.asarray([node]))
                if ctx.cards is not None:
                    return [int(ctx.cards[node])]
            if profile.name not in self._pickers:
                pickers = [(s, w) for s, w in scorers if isinstance(s, DevicePicker)]
                heaviest = max(pickers, key=lambda sw: sw[1])[0] if pickers else None
                self._pickers[profile.name] = cast(DevicePicker | None, heaviest)
            picker = self._pickers[profile.name]
            if picker is not None:
                columns = picker.pick(ctx, node)
                if columns is not None:
                    return columns
        return pick_devices(ctx, node, ctx.req.device_policy or profile.device_policy)

    def _profile(self, name: str) -> Profile:
        return known_profile(self.profiles, name, "node_policy")

    def _post_steps(self, profile: Profile) -> tuple[PostScorer, ...]:
        """The profile's scorers that declare a post-score step, in the profile's order, then
        its post-score plugins, in theirs."""
        found = self._post.get(profile.name)
        if found is None:
            weighted = self._weighted(profile)
            steps: list[PostScorer] = [s for s, _ in weighted if isinstance(s, PostScorer)]
            for name in profile.post:
                key = self._plugin_key(profile, name)
                step = self._post_plugins.get(key)
                if step is None:
                    step = self._post_plugins[key] = POST_SCORERS[name](self._env(profile, name))
                steps.append(step)
            found = self._post[profile.name] = tuple(steps)
        return found

    def _filters_off(self, req: Request) -> frozenset[str]:
        """The filters ``req``'s profile turns off (an unknown name is refused by ``place``
        before filtering; elsewhere it gets the engine's profile's)."""
        profile = self.profiles.get(req.node_policy) if req.node_policy else None
        return (profile or self.profile).disabled_filters

    def _weighted(
        self, profile: Profile, req: Request | None = None
    ) -> tuple[tuple[Scorer, float], ...]:
        """The profile's (scorer, weight) pairs for ``req``: its :class:`Preference` scorers only
        when ``req`` asks for one of them (then every scorer), else the others (the same tuple
        every time, so callers may compare by identity)."""
        found = self._weighted_cache.get(profile.name)
        if found is None:
            out = []
            for name, weight in profile.scorers:
                key = self._plugin_key(profile, name)
                scorer = self._scorers.get(key)
                if scorer is None:
                    scorer = self._scorers[key] = SCORERS[name](self._env(profile, name))
                out.append((scorer, weight))
            prefs = tuple(s for s, _ in out if isinstance(s, Preference))
            plain = tuple((s, w) for s, w in out if not isinstance(s, Preference))
            found = self._weighted_cache[profile.name] = _Scoring(plain, tuple(out), prefs)
        if req is not None and found.preferences and any(p.wanted(req) for p in found.preferences):
            return found.preferring
        return found.plain

    @staticmethod
    def _plugin_key(
        profile: Profile, name: str
    ) -> tuple[str, PluginArgs | None, PluginArgs | None]:
        """One plugin object per name, arguments and, for those built on it, workload model."""
        shared = profile.args_of(WORKLOAD) if name in WORKLOAD_PLUGINS else None
        return (name, profile.args_of(name), shared)

    def _env(self, profile: Profile, name: str) -> ScorerEnv:
        return ScorerEnv(
            self.seed,
            self.pipeline,
            self.workload,
            profile.args_of(name),
            (lambda: self._model(profile)) if name in WORKLOAD_PLUGINS else None,
            lambda: self.power,
        )

    def _model(self, profile: Profile) -> WorkloadModel:
        """The engine's workload model for ``profile``'s arguments of it (one per arguments)."""
        args = profile.args_of(WORKLOAD)
        found = self._models.get(args)
        if found is None:
            shared = args if isinstance(args, WorkloadArgs) else WorkloadArgs()
            seen = self._inherited.pop(args, ())
            found = WorkloadModel(self.state, self.pipeline, self.workload, shared, seen)
            found.deferred = self._learning_deferred
            self._models[args] = found
        return found

    # ------------------------------------------------------------------ online learning
    def inherit_learning(self, before: Engine) -> None:
        """Go on learning the online workload from where ``before`` (the engine this one replaces
        after the pool changed) was: its models' windows seed this engine's, so a rebuilt engine
        does not start cold (about 20 rebuilds of the measure in its first requests)."""
        if self.workload is not None:
            return
        for args, model in before._models.items():
            if args not in self._models:
                self._inherited[args] = model.seen
        self.defer_learning(before._learning_deferred)

    def seed_learning(self, requests: Sequence[Request]) -> None:
        """Start the online workload of this engine's own profile from ``requests`` (a restarted
        server's last jobs), when it has not learned anything yet."""
        args = self.profile.args_of(WORKLOAD)
        if self.workload is None and args not in self._models and requests:
            self._inherited[args] = tuple(requests)

    def defer_learning(self, deferred: bool = True) -> None:
        """Re-learn the online workload only when :meth:`relearn` is called (a front that places
        in batches calls it after each), not in the middle of placing."""
        self._learning_deferred = deferred
        for model in self._models.values():
            model.deferred = deferred
            if not deferred:
                model.relearn()

    def relearn(self, warm: bool = False) -> None:
        """Re-learn what is due (deferred learning); with ``warm``, build on a new workload now
        what the next placement would (``WorkloadModel.warm``)."""
        for model in self._models.values():
            model.relearn(warm)

    @property
    def learning_due(self) -> bool:
        """Is a deferred re-learn of the online workload due?"""
        return any(model.due for model in self._models.values())
