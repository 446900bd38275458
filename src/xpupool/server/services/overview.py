"""The fleet at a glance: per site and model, what is allocated, busy, used and out of service;
the capacity stranded for the jobs in sight; and why pending jobs wait.

Cheap at 5,000 nodes and 40,000 cards: every figure is a column sum over the engine's state and
the live readings (``np.bincount`` by group), never a loop over cards. What walks Python objects
is kept per inventory epoch (the card -> group layout, a loop over nodes) or per scheduling
generation (the stranded capacity, one engine explanation per distinct pending request), and
the pending jobs are walked once per call (bounded by the tenants' pending limits), the node
records too for the link domains (``domain_tally.py``: the one tally ``GET /v1/sites`` and
``/metrics`` show, each node's cards read from the columns).

Stranded capacity is the engine's measure (``engine/fragmentation/stranded.py``, the one the
simulator reports) for a workload of the pending jobs' shapes (the ``MAX_PENDING_SHAPES`` most
common) plus ``COMMON_SHAPES``: idle memory and compute on cards that none of them could take a
share of now.
"""

from __future__ import annotations

import weakref
from collections import Counter
from dataclasses import dataclass, field, fields
from operator import attrgetter

import numpy as np
import numpy.typing as npt

from xpupool.engine.cycle.retry_gate import NEVER_TRIED
from xpupool.engine.fragmentation import ShapeTable, Stranded, TargetWorkload, stranded_capacity
from xpupool.engine.outcomes import INADMISSIBLE
from xpupool.engine.reasons import PREEMPTION_MAY_HELP, Unschedulable
from xpupool.engine.state import ClusterState
from xpupool.model.request import DeviceRequest, Request
from xpupool.server.auth import Principal
from xpupool.server.plane import ControlPlane, PendingJob
from xpupool.server.schemas.jobs import JobPhase
from xpupool.server.schemas.overview import (
    FleetOverview,
    JobCounts,
    OverviewDomain,
    OverviewGroup,
    StrandedAt,
    StrandedCapacity,
)
from xpupool.server.services.domain_tally import any_named, domain_tally, named_sites

BUSY_UTIL_PCT = 10.0
"""A card whose reported utilisation is at least this is busy."""
MAX_PENDING_SHAPES = 32
"""Pending job shapes, most common first, the stranded measure takes besides the common ones."""
MAX_EXPLAINED = 64
"""Distinct pending requests the engine explains per call at most (the rest wait for the next:
explanations are kept until the state changes)."""
COMMON_SHAPES: tuple[Request, ...] = (
    *(Request(f"common-{k}x", 0, 0, DeviceRequest(count=k)) for k in (1, 2, 4, 8)),
    Request("common-half", 0, 0, DeviceRequest(count=1, core_permille=500)),
    Request("common-quarter", 0, 0, DeviceRequest(count=1, core_permille=250)),
)
"""Shapes asked for often enough to count as usable whatever is pending: 1, 2, 4 or 8 whole
cards, and half or a quarter of one card (that share of its compute and of its memory), no CPU
or host memory. A card's idle capacity no pending job and none of these can use is stranded:
less than a quarter of a card, on a card some job already shares, is what these leave out."""


class Waiting:
    """Why a pending job waits when the engine finds room for it now."""

    PREEMPTED = "waiting for preempted jobs to stop"
    BACKOFF = "retrying after a failed run (backoff)"
    NEW = "not tried yet"
    GANG = "gang: not every replica fits at once"
    QUOTA = "queue quota"
    INADMISSIBLE = "inadmissible: its queue's quota can never hold it"
    UNEXPLAINED = "not explained yet"
    ERROR = "cannot be scheduled"


# every field of a request but its name: two requests alike in these fare alike
_SHAPE = attrgetter(*(f.name for f in fields(Request) if f.name != "name"))
Key = tuple[object, ...]
IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class Layout:
    """Per inventory epoch: the group of every flat device slot (-1: no live card) and each
    group's (site, vendor, model); which slots are cordoned (card or node)."""

    group: npt.NDArray[np.intp]
    labels: tuple[tuple[str, str, str], ...]
    cordoned: npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Per group sums (arrays of the layout's group count) and the stranded capacity."""

    layout: Layout
    devices: IntArray
    allocated: IntArray
    busy: IntArray
    reporting: IntArray
    memory_total: IntArray
    memory_allocated: IntArray
    memory_used: FloatArray
    memory_reporting: IntArray
    core_allocated_milli: IntArray
    util_sum: FloatArray
    power: FloatArray
    power_reporting: IntArray
    cordoned: IntArray
    unhealthy: IntArray
    stranded: Stranded | None
    # per site: (stranded memory MiB, compute thousandths, cards); empty without a measure
    stranded_by_site: dict[str, tuple[int, int, int]]
    shapes: int


@dataclass
class _Kept:
    """What one plane's overviews keep between calls (see the module docstring)."""

    # each with the key it was made for: (a weak reference to the state, what else it depends
    # on); weak, so that an engine the plane replaced is not kept alive for its key
    layout: tuple[Key, Layout] | None = None
    table: tuple[Key, ShapeTable] | None = None
    stranded: tuple[Key, Stranded] | None = None
    explained: dict[tuple[object, ...], str] = field(default_factory=dict)
    explained_at: Key | None = None


_KEPT: weakref.WeakKeyDictionary[ControlPlane, _Kept] = weakref.WeakKeyDictionary()


def _kept(plane: ControlPlane) -> _Kept:
    found = _KEPT.get(plane)
    if found is None:
        found = _KEPT[plane] = _Kept()
    return found


def layout(plane: ControlPlane) -> Layout:
    """The card -> group layout of the plane's current state (made once per inventory epoch:
    cordons, health and registrations bump it). Call under the plane's lock."""
    st = plane.cluster_state
    kept = _kept(plane)
    if kept.layout is not None and _same(kept.layout[0], st, st.epoch):
        return kept.layout[1]
    catalog = st.catalog
    names: list[tuple[str, str]] = []
    for vendor, model in st.models:
        known = catalog.lookup(model, vendor)
        names.append((vendor, known.name if known is not None else model))
    keys: dict[tuple[str, str, str], int] = {}
    model_site_group = np.full((max(len(st.sites), 1), max(len(names), 1)), -1, np.intp)
    for i, site in enumerate(st.sites):
        for m, (vendor, model) in enumerate(names):
            model_site_group[i, m] = keys.setdefault((site, vendor, model), len(keys))
    live = st.dev_present & st.node_alive[:, None] & (st.dev_model >= 0)
    group = np.where(
        live, model_site_group[st.node_site[:, None], np.maximum(st.dev_model, 0)], -1
    ).reshape(-1)
    node_cordoned = np.zeros(st.n_nodes, np.bool_)
    for name, rec in plane.node_records.items():
        row = st.node_index.get(name)
        if row is not None and (rec.cordoned or rec.deleting_since is not None):
            node_cordoned[row] = True
    cordoned = (st.dev_cordoned | node_cordoned[:, None]).reshape(-1)
    used = np.unique(group[group >= 0])  # only groups that have cards, in key order
    renumber = np.full(len(keys) + 1, -1, np.intp)
    renumber[used] = np.arange(used.size)
    labels = list(keys)
    found = Layout(
        np.where(group >= 0, renumber[group], -1), tuple(labels[g] for g in used), cordoned
    )
    kept.layout = (_key(st, st.epoch), found)
    return found


def snapshot(plane: ControlPlane, now: float) -> Snapshot:
    """The fleet's per-group sums now, and its stranded capacity. Call under the plane's lock."""
    st = plane.cluster_state
    lay = layout(plane)
    present = lay.group >= 0
    idx = lay.group[present]
    n = len(lay.labels)

    def count(mask: npt.NDArray[np.bool_]) -> IntArray:
        return np.bincount(idx, weights=mask[present], minlength=n).astype(np.int64)

    def total(values: npt.NDArray[np.int64] | FloatArray) -> FloatArray:
        v = np.nan_to_num(values[present].astype(np.float64), nan=0.0)
        sums: FloatArray = np.bincount(idx, weights=v, minlength=n).astype(np.float64)
        return sums

    mem_alloc = (st.dev_mem_commit - st.dev_mem_free).reshape(-1)
    core_alloc = (st.dev_core_commit - st.dev_core_free).reshape(-1)
    held = (mem_alloc > 0) | (core_alloc > 0) | (st.dev_task_free < st.dev_task_total).reshape(-1)
    cols = plane.live.columns(st, now)
    with np.errstate(invalid="ignore"):
        busy = cols.util_pct >= BUSY_UTIL_PCT
    stranded, shapes = _stranded(plane)
    return Snapshot(
        layout=lay,
        devices=count(present),
        allocated=count(held),
        busy=count(busy),
        reporting=count(~np.isnan(cols.util_pct)),
        memory_total=total(st.dev_mem_total.reshape(-1)).astype(np.int64),
        memory_allocated=total(mem_alloc).astype(np.int64),
        memory_used=total(cols.memory_mib_used),
        memory_reporting=count(~np.isnan(cols.memory_mib_used)),
        core_allocated_milli=total(core_alloc).astype(np.int64),
        util_sum=total(cols.util_pct),
        power=total(cols.power_w),
        power_reporting=count(~np.isnan(cols.power_w)),
        cordoned=count(lay.cordoned),
        unhealthy=count(~st.dev_healthy.reshape(-1)),
        stranded=stranded,
        stranded_by_site=_by_site(st, stranded),
        shapes=shapes,
    )


def _by_site(st: ClusterState, stranded: Stranded | None) -> dict[str, tuple[int, int, int]]:
    if stranded is None:
        return {}
    k = len(st.sites)
    sums = [
        np.bincount(st.node_site, weights=v.astype(np.float64), minlength=k)
        for v in (stranded.memory_mib, stranded.core_milli, stranded.devices)
    ]
    return {
        site: (int(sums[0][i]), int(sums[1][i]), int(sums[2][i])) for i, site in enumerate(st.sites)
    }


def target_workload(plane: ControlPlane) -> TargetWorkload:
    """The pending jobs' shapes (the ``MAX_PENDING_SHAPES`` most common, FGD's grouping:
    ``TargetWorkload.from_requests``) and ``COMMON_SHAPES``, weighted alike (the stranded
    measure asks only whether some shape fits, not how likely it is)."""
    counts: Counter[tuple[object, ...]] = Counter()
    first: dict[tuple[object, ...], Request] = {}
    for p in plane.queued.values():  # a tuple per job (from_requests makes a Request per job)
        key = _SHAPE(p.request)
        counts[key] += 1
        first.setdefault(key, p.request)
    common = [first[key] for key, _ in counts.most_common(MAX_PENDING_SHAPES)]
    pending = TargetWorkload.from_requests(common, coverage=1.0)
    shapes = (*pending.shapes, *COMMON_SHAPES)
    return TargetWorkload(shapes, tuple(1.0 / len(shapes) for _ in shapes))


def _stranded(plane: ControlPlane) -> tuple[Stranded | None, int]:
    """The stranded capacity per node for :func:`target_workload`, kept per scheduling
    generation (the state's inventory epoch and allocation changes) and workload."""
    st = plane.cluster_state
    if st.n_nodes == 0:
        return None, 0
    workload = target_workload(plane)
    shapes = tuple(_SHAPE(r) for r in workload.shapes)
    kept = _kept(plane)
    if kept.stranded is not None and _same(kept.stranded[0], st, st.epoch, st.change_seq, shapes):
        return kept.stranded[1], len(shapes)
    if kept.table is None or not _same(kept.table[0], st, st.epoch, shapes):
        kept.table = (_key(st, st.epoch, shapes), plane.engine.shape_table(workload))
    found = stranded_capacity(st, kept.table[1])
    kept.stranded = (_key(st, st.epoch, st.change_seq, shapes), found)
    return found, len(shapes)


def stranded_now(plane: ControlPlane) -> Stranded | None:
    """The stranded capacity per node the overview shows (None on an empty pool), for the
    ``/metrics`` gauges: one figure for every view of the server (overview, dashboard, history,
    gauges). Not ``Engine.stranded``, which measures for the workload the engine learned (the
    extender's figure; docs/capacity.md). Call under the plane's lock."""
    return _stranded(plane)[0]


def _key(state: ClusterState, *rest: object) -> Key:
    return (weakref.ref(state), *rest)


def _same(key: Key, state: ClusterState, *rest: object) -> bool:
    """``key`` was made for ``state`` (the same object, still alive) and ``rest``."""
    ref = key[0]
    return isinstance(ref, weakref.ref) and ref() is state and key[1:] == rest


def pending_reason(plane: ControlPlane, job: PendingJob, now: float, budget: list[int]) -> str:
    """Why ``job`` waits, in a word: the engine's reason that rejects the most nodes for one of
    its replicas (capacity reasons first: :func:`_dominant`; ``engine.explain``, once per
    distinct request and state), or, where the engine finds room now, the waiting state that
    holds it back (:class:`Waiting`).
    ``budget`` ([explanations left]) bounds the engine calls of one overview. An inadmissible
    job is that first: room on the cards would not admit it."""
    if job.reason.startswith(INADMISSIBLE):
        return Waiting.INADMISSIBLE
    st = plane.cluster_state
    kept = _kept(plane)
    if kept.explained_at is None or not _same(kept.explained_at, st, st.epoch, st.change_seq):
        kept.explained, kept.explained_at = {}, _key(st, st.epoch, st.change_seq)
    shape = _SHAPE(job.request)
    found = kept.explained.get(shape)
    if found is None:
        if budget[0] <= 0:
            return Waiting.UNEXPLAINED
        budget[0] -= 1
        try:
            why: Unschedulable | None = plane.engine.explain(job.request)
        except Exception:  # a request the engine refuses outright (its profile is gone)
            found = Waiting.ERROR
        else:
            found = "" if why is None or not why.reasons else _dominant(why)
        kept.explained[shape] = found
    if found:
        return found
    if job.waiting_on:
        return Waiting.PREEMPTED
    if job.not_before > now:
        return Waiting.BACKOFF
    if job.tried == NEVER_TRIED:
        return Waiting.NEW
    if job.request.gang and job.request.replicas > 1:
        return Waiting.GANG
    return Waiting.QUOTA


def _dominant(why: Unschedulable) -> str:
    """The text of the reason counted on the most nodes (the first of equals) among those that
    freed capacity could cure (``PREEMPTION_MAY_HELP``: the nodes that could take the job but
    are full) when there are any: a job for H100s waits for room on the H100 nodes, not because
    the many other nodes hold no H100. Else among all (nothing could ever take it as it is)."""
    capacity = [r for r in why.reasons if r.reason in PREEMPTION_MAY_HELP]
    candidates = capacity or list(why.reasons)
    best = candidates[0]
    for r in candidates[1:]:
        if r.count > best.count:
            best = r
    return best.text


def fleet_overview(plane: ControlPlane, principal: Principal) -> FleetOverview:
    """The overview as ``principal`` may see it (see ``schemas/overview.py``)."""
    mine = None if principal.is_admin else principal.tenant
    now = plane.clock()

    def tally() -> tuple[Snapshot, dict[str, int], JobCounts, list[OverviewDomain]]:
        snap = snapshot(plane, now)
        reasons: dict[str, int] = {}
        budget = [MAX_EXPLAINED]
        pending = 0
        for job in plane.queued.values():
            if mine is not None and job.tenant != mine:
                continue
            pending += 1
            why = pending_reason(plane, job, now, budget)
            reasons[why] = reasons.get(why, 0) + 1
        running = holding = 0
        for held in plane.held_jobs.values():
            if mine is not None and held.tenant != mine:
                continue
            holding += 1
            running += held.state is JobPhase.RUNNING
        counts = JobCounts(pending=pending, running=running, holding=holding)
        return snap, reasons, counts, _domains(plane)

    snap, reasons, counts, domains = plane.read(tally)  # the sums and the counts of one state
    return FleetOverview(
        generated_at=now,
        scope="fleet" if mine is None else "tenant",
        busy_util_pct=BUSY_UTIL_PCT,
        groups=groups(snap),
        stranded=stranded_view(snap),
        pending_by_reason=dict(sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))),
        jobs=counts,
        domains=domains,
    )


def _domains(plane: ControlPlane) -> list[OverviewDomain]:
    """The domains of the sites that name some (``domain_tally.py``). Call under the lock."""
    if not any_named(plane):
        return []
    found = domain_tally(plane)
    named = named_sites(found)
    return [
        OverviewDomain(
            site=d.site,
            name=d.name,
            nodes=d.nodes,
            devices_total=d.devices,
            devices_free=d.devices_free,
            devices_allocated=d.devices_allocated,
        )
        for d in found
        if d.site in named
    ]


def groups(snap: Snapshot) -> list[OverviewGroup]:
    out = []
    for g, (site, vendor, model) in enumerate(snap.layout.labels):
        out.append(
            OverviewGroup(
                site=site,
                vendor=vendor,
                device_model=model,
                devices_total=int(snap.devices[g]),
                devices_allocated=int(snap.allocated[g]),
                devices_busy=int(snap.busy[g]),
                devices_reporting=int(snap.reporting[g]),
                memory_mib_total=int(snap.memory_total[g]),
                memory_mib_allocated=int(snap.memory_allocated[g]),
                memory_mib_used=int(snap.memory_used[g]) if snap.memory_reporting[g] else None,
                core_pct_total=100.0 * int(snap.devices[g]),
                core_pct_allocated=int(snap.core_allocated_milli[g]) / 10,
                core_pct_used=float(snap.util_sum[g]) if snap.reporting[g] else None,
                power_w=float(snap.power[g]) if snap.power_reporting[g] else None,
                cordoned=int(snap.cordoned[g]),
                unhealthy=int(snap.unhealthy[g]),
            )
        )
    return sorted(out, key=lambda g: (g.site, g.vendor, g.device_model))


def stranded_view(snap: Snapshot) -> StrandedCapacity:
    st = snap.stranded
    if st is None:
        return StrandedCapacity(memory_mib=0, core_pct=0.0, devices=0, shapes=snap.shapes)
    return StrandedCapacity(
        memory_mib=st.total_memory_mib,
        core_pct=st.total_core_milli / 10,
        devices=int(st.devices.sum()),
        shapes=snap.shapes,
        by_site={
            site: StrandedAt(memory_mib=mib, core_pct=milli / 10, devices=cards)
            for site, (mib, milli, cards) in sorted(snap.stranded_by_site.items())
        },
    )
