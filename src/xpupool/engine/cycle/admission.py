"""Admission: queue quotas per device flavour, borrowing within a cohort, and fair-share order.

Modelled on Kueue. A queue belongs to a tenant and holds quotas keyed by (flavour, resource): a
flavour is a vendor key (``nvidia``), a model name or family the catalog knows (``A100``, ``910B``),
or ``*`` for any device, and ``FLAVOUR@SITE`` narrows one to a site's devices (a quota per site
beside fleet-wide ones); resources are device count, device memory (MiB) and compute (thousandths
of a device). To admit a request, its queue's flavours are tried in order: the first whose devices
the request can use and whose quota has room for the request's demand (its own nominal quota plus
what it may borrow of the cohort's unused nominal quota, up to its borrowing limit) wins,
and the request is placed only on that flavour's devices. Usage is charged from the allocations
actually made, so a share of a card is charged at its real size, and released exactly.

Pending requests are ordered by dominant resource fairness: the tenant whose largest share of any
cluster resource (divided by its weight) is smallest goes first, then higher priority, then older;
or, given a :class:`DecayedUsage`, by that share held over a decaying window (``fair_share.py``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from xpupool.engine.cycle.fair_share import DecayedUsage
from xpupool.engine.engine import Engine, Placement
from xpupool.engine.filters.device_model import model_table_mask
from xpupool.engine.outcomes import (
    FlavorCause,
    Inadmissible,
    NoNodeFits,
    NotAdmitted,
    NoUsableFlavor,
    QuotaCeiling,
    QuotaExceeded,
    Refused,
)
from xpupool.engine.state import BoolArray
from xpupool.model.allocation import Allocation
from xpupool.model.errors import NotFound, RequestError
from xpupool.model.request import WHOLE, Request
from xpupool.model.vendor import VENDOR_KEYS, find_vendor

ANY = "*"
SITE_MARK = "@"  # 'A100@beijing': a flavour held in one site only
UNLISTED = "unlisted"  # the flavour charged for devices no quota of the queue names (no quota)


class Resource(StrEnum):
    DEVICES = "devices"
    DEVICE_MEMORY_MIB = "device_memory_mib"
    CORES_PERMILLE = "cores_permille"


# what a tenant really holds, for fair share: a device count would count a 1 GiB share as a card
_HELD = (Resource.DEVICE_MEMORY_MIB, Resource.CORES_PERMILLE)


@dataclass(frozen=True, slots=True)
class Quota:
    """``nominal`` of ``resource`` on ``flavour``; ``borrowing_limit`` caps what may be borrowed
    from the cohort on top (None = no cap; 0 = never borrow)."""

    flavor: str
    resource: Resource
    nominal: int
    borrowing_limit: int | None = None

    def __post_init__(self) -> None:
        if self.nominal < 0:
            raise RequestError("quota.nominal", self.nominal, "must not be negative")
        if self.borrowing_limit is not None and self.borrowing_limit < 0:
            raise RequestError(
                "quota.borrowing_limit", self.borrowing_limit, "must not be negative"
            )


class Unlisted(StrEnum):
    """What a queue with quotas does with devices none of its flavours name."""

    ALLOW = "allow"  # usable without quota, after the listed flavours
    DENY = "deny"  # not usable by this queue


class Preemption(StrEnum):
    """Whether a queue's jobs may evict running work for room (Kueue's ``withinClusterQueue``)."""

    LOWER_PRIORITY = "lower_priority"  # any running job of strictly lower priority, whole
    NEVER = "never"


@dataclass(frozen=True, slots=True)
class QueueSpec:
    name: str
    tenant: str
    quotas: tuple[Quota, ...]
    cohort: str | None = None
    weight: float = 1.0
    preemption: Preemption = Preemption.LOWER_PRIORITY
    unlisted_flavors: Unlisted = Unlisted.ALLOW
    allow_unfittable: bool = False  # keep jobs nothing in the pool could ever hold (pools grow)
    preempts_min_run: bool = False  # its jobs may preempt others inside their min_run_s too


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a request was not admitted: ``outcome`` names the flavours and what ran out in each
    (``engine/outcomes.py`` renders it)."""

    queue: str
    outcome: Refused
    capacity_only: bool = False  # every flavour had quota but no room: preemption may help


@dataclass(frozen=True, slots=True)
class Admitted:
    queue: str
    flavor: str
    placement: Placement


class Admission:
    """Quota bookkeeping on top of one :class:`Engine`; the engine still decides where."""

    def __init__(
        self,
        engine: Engine,
        queues: Iterable[QueueSpec],
        history: DecayedUsage | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        """``history`` with ``clock``: order by the share held over a decaying window
        (``fair_share.py``) instead of DRF on what is held now; the caller keeps ``history``
        across rebuilds of the admission books."""
        if (history is None) != (clock is None):
            raise ValueError("history and clock go together")
        self.history = history
        self._clock = clock
        self.engine = engine
        self.queues = {q.name: q for q in queues}
        self.usage: dict[str, dict[tuple[str, Resource], int]] = {
            name: defaultdict(int) for name in self.queues
        }
        self._charged: dict[int, tuple[str, str, dict[Resource, int]]] = {}
        self._flavor_masks: dict[tuple[str, int], BoolArray] = {}
        self._totals: tuple[int, dict[Resource, float]] = (-1, {})
        self.released = 0  # releases so far: a refusal stays certain until this or the epoch moves

    def rebase(self, engine: Engine) -> None:
        """Keep these books over ``engine``, rebuilt by the front with every admitted allocation
        applied again under its id (a card re-cut: ``sim/partition_timed.py``); what was kept
        per epoch of the old engine is dropped, a new engine's epochs starting afresh."""
        self.engine = engine
        self._flavor_masks = {}
        self._totals = (-1, {})

    # ------------------------------------------------------------------ admitting
    def admit(self, req: Request, queue: str) -> Admitted | Refusal:
        """Assign a flavour with room and place ``req`` within it; charge what was allocated."""
        spec = self._queue(queue)
        flavors = list(dict.fromkeys(q.flavor for q in spec.quotas))
        if req.devices.count == 0 or not flavors:
            outcome = self._place(req, spec, ANY, None)
            if outcome.placement.allocations:
                return outcome
            why = NoNodeFits(outcome.placement.failures[0])
            return Refusal(queue, why, capacity_only=True)
        ctx = self.engine.pipeline.context(req)
        eligible = self.engine.pipeline.eligible(ctx)
        causes: list[FlavorCause] = []
        quota_short = False
        for flavor in flavors:
            mask = eligible & self.flavor_mask(flavor)
            if not mask.any():
                continue
            short = self._short_of(spec, flavor, self._demand(req, mask))
            if short is not None:
                causes.append(short)
                quota_short = True
                continue
            outcome = self._place(req, spec, flavor, mask)
            if outcome.placement.allocations:  # placed, fully or (without gang) in part
                return outcome
            causes.append(NoNodeFits(outcome.placement.failures[0], flavor))
        if spec.unlisted_flavors is Unlisted.ALLOW:
            mask = eligible & ~self._listed_mask(flavors)
            if mask.any():
                outcome = self._place(req, spec, UNLISTED, mask)
                if outcome.placement.allocations:
                    return outcome
                causes.append(NoNodeFits(outcome.placement.failures[0], UNLISTED))
        if not causes:
            return Refusal(queue, NoUsableFlavor())
        return Refusal(queue, NotAdmitted(tuple(causes)), capacity_only=not quota_short)

    def restore(self, alloc: Allocation, queue: str, flavor: str, *, in_engine: bool = True) -> str:
        """Re-charge an allocation admitted earlier (a server restarting from its store, or queues
        redefined); ``in_engine`` also re-applies it to the engine's state. Returns the flavour
        charged (see :meth:`flavor_for`)."""
        if in_engine:
            self.engine.restore(alloc)
        spec = self._queue(queue)
        flavor = self.flavor_for(alloc, spec, flavor)
        self._charge(alloc, spec.name, flavor)
        return flavor

    def flavor_for(self, alloc: Allocation, spec: QueueSpec, flavor: str) -> str:
        """The flavour an allocation is charged to in ``spec``: the one it was admitted under
        while the queue still lists it; else (quotas set or changed since) the first listed
        flavour holding all its devices, so a new quota counts the work admitted before it."""
        flavors = list(dict.fromkeys(q.flavor for q in spec.quotas))
        if not flavors or flavor in flavors or not alloc.devices:
            return flavor if flavors else ANY
        state = self.engine.state
        slots = [state.uuid_slot.get(d.uuid, d.slot) for d in alloc.devices]
        for candidate in flavors:
            mask = self.flavor_mask(candidate).reshape(-1)
            if all(mask[slot] for slot in slots):
                return candidate
        return UNLISTED

    def release(self, alloc: Allocation | int) -> None:
        """Release an admitted allocation in the engine and return its charge to its queue."""
        alloc_id = alloc if isinstance(alloc, int) else alloc.id
        self._count_history()
        self.engine.release(alloc_id)
        self.released += 1
        queue, flavor, charge = self._charged.pop(alloc_id)
        for resource, amount in charge.items():
            self.usage[queue][(flavor, resource)] -= amount

    def order(self, pending: Sequence[tuple[Request, str]]) -> list[int]:
        """Indices of ``pending`` (request, queue) in admission order: DRF, priority, age."""
        if len(pending) <= 1:
            return list(range(len(pending)))
        shares = self.dominant_shares() if self.history is None else self.history_shares()

        def key(i: int) -> tuple[float, int, int]:
            req, queue = pending[i]
            return (shares.get(self._queue(queue).tenant, 0.0), -req.priority, i)

        return sorted(range(len(pending)), key=key)

    def history_shares(self) -> dict[str, float]:
        """Per tenant: its dominant share held over the decaying window (``fair_share.py``),
        divided by its weight."""
        self._count_history()
        assert self.history is not None
        weight = {spec.tenant: spec.weight for spec in self.queues.values()}
        return {t: u / max(weight.get(t, 1.0), 1e-9) for t, u in self.history.shares().items()}

    def _count_history(self) -> None:
        """Before what is held changes: count what was held up to now (no history: nothing)."""
        if self.history is None or self._clock is None:
            return
        self.history.advance(self._clock(), self.dominant_shares(weighted=False))

    def dominant_shares(self, weighted: bool = True) -> dict[str, float]:
        """Per tenant: max over device memory and compute of (what it holds / the pool's total),
        divided by its weight (``weighted``). A share of a card counts as what it holds, not as
        a device."""
        capacity = self._capacity()
        used: dict[str, dict[Resource, float]] = defaultdict(lambda: defaultdict(float))
        weight: dict[str, float] = {}
        for name, spec in self.queues.items():
            weight[spec.tenant] = spec.weight
            for (_, resource), amount in self.usage[name].items():
                if resource in _HELD:
                    used[spec.tenant][resource] += amount
        return {
            tenant: max((v / capacity[r] for r, v in res.items() if capacity[r]), default=0.0)
            / (max(weight[tenant], 1e-9) if weighted else 1.0)
            for tenant, res in used.items()
        }

    def pool_totals(self) -> tuple[float, float]:
        """(device memory MiB, cards) of the pool: the denominators of a dominant share."""
        capacity = self._capacity()
        return capacity[Resource.DEVICE_MEMORY_MIB], capacity[Resource.DEVICES]

    def _capacity(self) -> dict[Resource, float]:
        """The cluster's totals per resource, the denominators of the shares (per epoch)."""
        s = self.engine.state
        if self._totals[0] != s.epoch:
            devices = float(s.n_devices)
            self._totals = (
                s.epoch,
                {
                    Resource.DEVICES: devices,
                    Resource.DEVICE_MEMORY_MIB: float(s.dev_mem_total.sum()),
                    Resource.CORES_PERMILLE: devices * WHOLE,
                },
            )
        return self._totals[1]

    # ------------------------------------------------------------------ flavours and quota
    def flavor_mask(self, flavor: str) -> BoolArray:
        """``[N, W]`` devices of a flavour: a vendor, a model or family name, or ``*``; with
        ``@SITE`` (``A100@beijing``, ``*@beijing``) only that site's devices, so a quota may be
        held per site or fleet-wide (Kueue's flavours across clusters)."""
        s = self.engine.state
        key = (flavor, s.epoch)
        found = self._flavor_masks.get(key)
        if found is None:
            kind, at, site = flavor.partition(SITE_MARK)
            if kind == ANY:
                found = s.dev_present.copy()
            elif (vendor := find_vendor(kind)) is not None:
                found = s.dev_vendor == VENDOR_KEYS.index(vendor.key)
            else:
                allowed = model_table_mask(s, (kind,))
                allowed[-1] = False
                found = allowed[s.dev_model] & s.dev_present
            if at:
                found = found & s.site_mask((site,))[:, None]
            self._flavor_masks[key] = found
        return found

    def _listed_mask(self, flavors: Sequence[str]) -> BoolArray:
        """``[N, W]`` devices some of ``flavors`` names."""
        mask = np.zeros_like(self.engine.state.dev_present)
        for flavor in flavors:
            mask |= self.flavor_mask(flavor)
        return mask

    def _demand(self, req: Request, mask: BoolArray) -> dict[Resource, int]:
        """What ``req`` would take on this flavour; a share of memory is priced on its largest card."""
        d, n = req.devices, req.devices.count * req.replicas
        if d.memory_mib is not None:
            per_device = d.memory_mib
        else:
            card = int(self.engine.state.dev_mem_total[mask].max(initial=0))
            per_device = card * (d.need_memory_permille or WHOLE) // WHOLE
        return {
            Resource.DEVICES: n,
            Resource.DEVICE_MEMORY_MIB: n * per_device,
            Resource.CORES_PERMILLE: n * d.need_core_permille,
        }

    def _short_of(
        self, spec: QueueSpec, flavor: str, demand: dict[Resource, int], *, ever: bool = False
    ) -> QuotaExceeded | QuotaCeiling | None:
        """None when the demand fits the flavour's quota (with borrowing), else what runs out.
        ``ever``: against :meth:`ceiling`, the most the queue can hold when nothing else in its
        cohort is used, instead of its room now."""
        for quota in spec.quotas:
            if quota.flavor != flavor:
                continue
            used = 0 if ever else self.usage[spec.name][(flavor, quota.resource)]
            room = self.ceiling(spec, quota) if ever else self.room(spec, quota)
            if demand[quota.resource] > room:
                borrowable = max(used + room - quota.nominal, 0) if spec.cohort else 0
                r, asked = quota.resource, demand[quota.resource]
                if ever:
                    return QuotaCeiling(flavor, r, asked, quota.nominal, borrowable)
                return QuotaExceeded(flavor, r, used, asked, quota.nominal, borrowable)
        return None

    def room(self, spec: QueueSpec, quota: Quota) -> int:
        """How much more of ``quota``'s resource the queue may take now.

        Its own unused nominal quota is guaranteed, even while others borrow it (the cohort may
        then pass its nominal sum until the lender reclaims, see ``cycle.py``). Beyond that it may
        borrow the cohort's unused nominal quota, which already counts what was borrowed, so
        nothing is lent twice; and its total stays within nominal + borrowing limit."""
        return self._room(spec, quota, lambda name, key: self.usage[name][key])

    def ceiling(self, spec: QueueSpec, quota: Quota) -> int:
        """The most of ``quota``'s resource the queue can ever hold: its :meth:`room` when nothing
        in its cohort is used, which is its nominal plus, in a cohort, the lesser of its
        borrowing limit (none: unlimited) and the nominal quota of the cohort's other queues.
        Only a change of some quota of the cohort moves it (Kueue keeps a workload above it
        inadmissible until then)."""
        return self._room(spec, quota, lambda name, key: 0)

    def _room(
        self, spec: QueueSpec, quota: Quota, used_of: Callable[[str, tuple[str, Resource]], int]
    ) -> int:
        """:meth:`room` with each queue's use of a (flavour, resource) read from ``used_of``."""
        key = (quota.flavor, quota.resource)
        used = used_of(spec.name, key)
        own = max(quota.nominal - used, 0)
        if spec.cohort is None:
            return own
        cohort_unused = sum(
            sum(q.nominal for q in other.quotas if (q.flavor, q.resource) == key)
            - used_of(other.name, key)
            for other in self.queues.values()
            if other.cohort == spec.cohort
        )
        room = max(own, cohort_unused)
        if quota.borrowing_limit is not None:
            room = min(room, quota.nominal + quota.borrowing_limit - used)
        return max(room, 0)

    def inadmissible(self, req: Request, queue: str) -> Inadmissible | None:
        """Why no future of ``queue``'s quotas can admit ``req``, or None when one might.

        ``req`` is inadmissible when every flavour of the queue whose devices its selectors
        accept (usable now or not: a cordon ends) asks more than :meth:`ceiling` of some
        resource, and no device is left to it outside the quotas (``unlisted_flavors`` deny,
        or no such device). Only a quota change in its cohort can change this; capacity freed
        by other jobs cannot. A request no flavour's devices accept is for the pool's verdict
        (``engine/verdict.py``), not this one: None."""
        spec = self._queue(queue)
        flavors = list(dict.fromkeys(q.flavor for q in spec.quotas))
        if req.devices.count == 0 or not flavors:
            return None
        accepted = self.engine.pipeline.selectable(self.engine.pipeline.context(req))
        if (
            spec.unlisted_flavors is Unlisted.ALLOW
            and (accepted & ~self._listed_mask(flavors)).any()
        ):
            return None
        ceilings: list[QuotaCeiling] = []
        for flavor in flavors:
            mask = accepted & self.flavor_mask(flavor)
            if not mask.any():
                continue
            short = self._short_of(spec, flavor, self._demand(req, mask), ever=True)
            if not isinstance(short, QuotaCeiling):
                return None
            ceilings.append(short)
        return Inadmissible(tuple(ceilings)) if ceilings else None

    def within_nominal(self, req: Request, queue: str) -> bool:
        """Whether ``req`` would fit some flavour of ``queue`` within its nominal quota alone."""
        spec = self._queue(queue)
        if req.devices.count == 0:
            return False
        eligible = self.engine.pipeline.eligible(self.engine.pipeline.context(req))
        for flavor in dict.fromkeys(q.flavor for q in spec.quotas):
            mask = eligible & self.flavor_mask(flavor)
            if not mask.any():
                continue
            demand = self._demand(req, mask)
            usage = self.usage[spec.name]
            if all(
                usage[(q.flavor, q.resource)] + demand[q.resource] <= q.nominal
                for q in spec.quotas
                if q.flavor == flavor
            ):
                return True
        return False

    def borrowing(self, queue: str) -> bool:
        """Whether ``queue`` uses more than its nominal quota of some flavour and resource."""
        spec = self._queue(queue)
        usage = self.usage[spec.name]
        return any(usage[(q.flavor, q.resource)] > q.nominal for q in spec.quotas)

    def queue_of(self, alloc_id: int) -> str | None:
        """The queue an admitted allocation is charged to."""
        found = self._charged.get(alloc_id)
        return None if found is None else found[0]

    def _place(
        self, req: Request, spec: QueueSpec, flavor: str, mask: BoolArray | None
    ) -> Admitted:
        self._count_history()  # what was held until now, before this placement changes it
        placement = self.engine.place(req, within=mask)
        for alloc in placement.allocations:
            self._charge(alloc, spec.name, flavor)
        return Admitted(spec.name, flavor, placement)

    def _charge(self, alloc: Allocation, queue: str, flavor: str) -> None:
        """Charge ``alloc`` to ``queue``; a restore re-charges what was held already, so the
        history counts nothing here (:meth:`_place` and :meth:`release` count it)."""
        charge = {
            Resource.DEVICES: len(alloc.devices),
            Resource.DEVICE_MEMORY_MIB: sum(s.memory_mib for s in alloc.devices),
            Resource.CORES_PERMILLE: sum(s.core_permille for s in alloc.devices),
        }
        for resource, amount in charge.items():
            self.usage[queue][(flavor, resource)] += amount
        self._charged[alloc.id] = (queue, flavor, charge)

    def _queue(self, name: str) -> QueueSpec:
        try:
            return self.queues[name]
        except KeyError:
            raise NotFound("queue", name) from None
