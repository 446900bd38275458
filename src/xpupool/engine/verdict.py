"""Whether a request could ever be placed: asked of the pool as if it were empty and healthy.

A request that fits nowhere now waits for capacity; one that no node could hold even empty (cards
too small, too few on any node, a node too small for its CPU or memory, link groups too narrow, more
replicas than the whole pool holds at once, a gang that no single site holds) would wait forever.
Every registered node counts, cordoned, unhealthy, lost and tainted ones included: they may come
back, and an admin may take a taint off as they uncordon a node (a request that tolerates no taint
of the only nodes that could hold it waits, as a pod does in Kubernetes, its reason naming the
taint). The question is answered by the same filters on an empty twin of the cluster state, built
again when the inventory changes, so "could ever fit" and "fits now" cannot disagree about what
fits. The answer names the closest miss: the check that failed on the nodes that passed the most
checks, with the largest value the pool has and the value asked ("the largest H100 has 80Gi; asked
100Gi"). Answers are kept per request (its name aside) until the twin is built again: a submission
of a shape asked before costs a lookup, not a pass of the filters over every node, which was a
large share of the submit service's time (docs/benchmarks.md and its history).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from xpupool.engine.device_fit import count_per_node
from xpupool.engine.gang_bound import gang_room
from xpupool.engine.gang_sites import (
    SPAN_HINT,
    domain_rooms,
    domain_word,
    keeps_to_one_site,
    largest_domain,
)
from xpupool.engine.lru import Lru
from xpupool.engine.pipeline import Pipeline
from xpupool.engine.reasons import TEXT, Reason
from xpupool.engine.state import BoolArray, ClusterState
from xpupool.model.device import Node
from xpupool.model.quantity import format_card_mib, format_cpu_milli, format_mib
from xpupool.model.request import Request, fields_but


@dataclass(frozen=True, slots=True)
class Miss:
    """Why nothing in the pool can hold a request: ``field`` of the request that asks too much
    (a path such as ``devices.memory``) and ``reason`` with the numbers."""

    field: str
    reason: str


ANSWERS_KEPT = 4096
"""Requests whose answer is kept (a stream repeats a few shapes; a bound for one that does not)."""

_ANSWER_KEY = fields_but("name")
"""What an answer depends on: the request but its name."""


class Verdicts:
    """Answers :meth:`never_fits` for the pool of one cluster state."""

    def __init__(
        self,
        state: ClusterState,
        filters_off: Callable[[Request], frozenset[str]] | None = None,
    ) -> None:
        self.state = state
        self.filters_off = filters_off  # the filters a request's profile turns off (the engine's)
        self._twin: tuple[list[Node], Pipeline] | None = None  # (the nodes it was built from, it)
        # for this twin, keyed by _ANSWER_KEY
        self._answers: Lru[tuple[object, ...], tuple[Miss | None]] = Lru(ANSWERS_KEPT)
        self._sites: Lru[tuple[object, ...], frozenset[str]] = Lru(ANSWERS_KEPT)

    def never_fits(self, req: Request) -> Miss | None:
        """The closest miss when no node of the empty pool takes ``req`` whole, else None. A pool
        without nodes yet says nothing: its first nodes may be on their way. A node's container
        runtime counts as its cards do (an image job whose cards are only on nodes without one
        can never start); whether a node with one is alive now is the caller's question."""
        if not self.state.n_nodes:
            return None
        pipe = self._empty()
        key = _ANSWER_KEY(req)
        kept = self._answers.get(key)
        if kept is not None:
            return kept[0]
        req = replace(req, name="")
        return self._answers.put(key, (self._judge(pipe, req),))[0]

    def _judge(self, pipe: Pipeline, req: Request) -> Miss | None:
        ctx = pipe.context(req)
        fit = pipe.filter(ctx)
        if not fit.any():
            return self._closest_miss(pipe, req)
        if req.replicas > 1:
            room = gang_room(pipe, req)
            if room.at_most < req.replicas:
                return Miss(
                    "replicas",
                    f"the whole pool, empty, holds {room.at_most} replicas of this at once; "
                    f"asked {req.replicas}",
                )
            if keeps_to_one_site(pipe.state, req):
                where, most = largest_domain(pipe.state, domain_rooms(pipe.state, room))
                if most < req.replicas:
                    unit = domain_word(pipe.state)
                    return Miss(
                        "replicas",
                        f"no single {unit} holds {req.replicas} replicas of this, even empty (the "
                        f"largest: {where}, {most}); add {SPAN_HINT} to place it across sites",
                    )
        return None

    def sites_that_fit(self, req: Request) -> frozenset[str]:
        """The sites where some node of the empty pool takes one replica of ``req``: where it
        could ever run, without the closest miss :meth:`never_fits` works out (site choice asks
        per site, ``site_choice.py``)."""
        pipe = self._empty()
        key = _ANSWER_KEY(req)
        kept = self._sites.get(key)
        if kept is None:
            fit = pipe.filter(pipe.context(replace(req, name="")))
            found = np.unique(pipe.state.node_site[fit])
            kept = self._sites.put(key, frozenset(pipe.state.sites[i] for i in found.tolist()))
        return kept

    def warm(self) -> None:
        """Build the empty twin now (at start), not on the first submission that asks."""
        self._empty()

    def _empty(self) -> Pipeline:
        """The filters over the empty twin, built again only when nodes were added: the twin
        holds every node and card as schedulable, healthy and untainted, so a cordon, a health
        change or a lost node (each bumps the state's epoch) changes nothing in it. Building it costs as much
        as the pool is large, on the request path (issue 25)."""
        state = self.state
        if self._twin is None or self._twin[0] is not state.nodes:  # add_node makes a new list
            nodes = [
                replace(
                    n,
                    schedulable=True,
                    taints=(),
                    devices=tuple(replace(d, healthy=True) for d in n.devices),
                    cordoned_devices=frozenset(),
                )
                for n in state.nodes
            ]
            twin = ClusterState(nodes, seed=state.seed, catalog=state.catalog, compat=state.compat)
            pipe = Pipeline(twin)
            if self.filters_off is not None:
                pipe.filters_off = self.filters_off
            self._twin = (state.nodes, pipe)
            self._answers.clear()
            self._sites.clear()
        return self._twin[1]

    def _closest_miss(self, pipe: Pipeline, req: Request) -> Miss:
        ctx = pipe.context(req)
        pipe.filter(ctx)
        labels, blame = pipe._blame(ctx)
        s, d = pipe.state, req.devices
        # The closest nodes: those with enough cards of the kind asked, when some have; the
        # miss is then their CPU, memory, card memory or link groups. Else the kind itself.
        matching = count_per_node(pipe.eligible(ctx)) if ctx.k else np.zeros(s.n_nodes, np.int64)
        enough = matching >= ctx.k
        pool: BoolArray = enough if enough.any() else np.ones(s.n_nodes, np.bool_)
        deepest = int(blame[pool].max())
        near: BoolArray = pool & (blame == deepest)
        reason, detail = labels[deepest]
        if reason in (Reason.SITE_NOT_ALLOWED, Reason.SITE_EXCLUDED, Reason.LABEL_MISSING):
            return _placement_miss(s, req, reason)
        if reason is Reason.INSUFFICIENT_CPU:
            most = int(s.node_cpu_total[near].max())
            return Miss(
                "cpu",
                f"the largest node has {format_cpu_milli(most)} CPU; asked "
                f"{format_cpu_milli(req.cpu_milli)}",
            )
        if reason is Reason.INSUFFICIENT_MEMORY:
            most = int(s.node_mem_total[near].max())
            return Miss(
                "memory",
                f"the largest node has {format_mib(most)} memory; asked {format_mib(req.memory_mib)}",
            )
        if reason is Reason.MODEL_NOT_ALLOWED and d.models:
            have = _models(s, s.dev_present) or "no cards"
            wanted = "/".join(d.models)
            return Miss("devices.models", f"no {wanted} card in the pool; it has {have}")
        eligible = pipe.eligible(ctx) & near[:, None]
        kinds = _models(s, eligible) or "matching"
        if reason is Reason.INSUFFICIENT_DEVICE_MEMORY:
            biggest = int(s.dev_mem_total[eligible].max(initial=0))
            asked = ctx.need_mib if isinstance(ctx.need_mib, int) else int(ctx.need_mib.max())
            return Miss(
                "devices.memory",
                f"the largest {kinds} card has {format_mib(biggest)}; asked {format_mib(asked)}",
            )
        if reason is Reason.TOO_FEW_DEVICES or (
            reason in _SELECTORS and int(count_per_node(eligible).max(initial=0)) > 0
        ):
            most = int(count_per_node(eligible).max(initial=0))
            return Miss(
                "devices.count",
                f"no node has more than {most} {kinds} cards; asked {ctx.k} per replica",
            )
        if reason is Reason.TOPOLOGY:
            groups = s.dev_group[eligible]
            groups = groups[groups >= 0]
            if not groups.size:
                return Miss(
                    "devices.topology",
                    f"{kinds} cards have no link group (PCIe only); asked {ctx.k} in one",
                )
            widest = int(np.bincount(groups).max())
            return Miss(
                "devices.topology",
                f"the widest link group of {kinds} cards has {widest}; asked {ctx.k} in one",
            )
        if reason is Reason.NUMA:
            numas = s.dev_numa[eligible]
            numas = numas[numas >= 0]
            if not numas.size:
                return Miss(
                    "devices.topology",
                    f"{kinds} cards have no NUMA node reported; asked {ctx.k} on one",
                )
            widest = int(np.bincount(numas).max())
            return Miss(
                "devices.topology",
                f"the largest NUMA node has {widest} {kinds} cards; asked {ctx.k} on one",
            )
        if reason is Reason.CARD_MEMORY:
            low, high = d.min_card_mib, d.max_card_mib
            span = "..".join("" if v is None else format_card_mib(v) for v in (low, high))
            sizes = sorted({int(v) for v in s.dev_card_mib[s.dev_present]})
            have = ", ".join(format_card_mib(v) for v in sizes)
            return Miss("devices.card_memory", f"no card of {span} in the pool; it has {have}")
        if reason is Reason.NO_CONTAINER_RUNTIME:
            return _runtime_miss(s, near, kinds if ctx.k else "")
        field = _FIELDS.get(reason, "devices")
        what = TEXT[reason].format(detail=detail)
        return Miss(field, f"no node of the pool passes: {what}")


def _placement_miss(state: ClusterState, req: Request, reason: Reason) -> Miss:
    """Where the request may run leaves no node that has what it asks: a site or label that no
    node has at all (usually a typo), else the node kind that the place lacks."""
    sites = ", ".join(state.sites)
    if reason is Reason.LABEL_MISSING:
        for label, value in req.node_selector:
            if not state.label_mask(((label, value),)).any():
                have = ", ".join(sorted(state.label_values.get(label, {}))) or "none"
                return Miss(
                    f"node_selector.{label}",
                    f"no node has label {label}={value}; values of {label} in the pool: {have}",
                )
        wanted = ",".join(f"{k}={v}" for k, v in req.node_selector)
        return Miss("node_selector", f"no node has all of {wanted} and what the request asks")
    for site in req.sites:
        if site not in state.site_nodes:
            return Miss("site", f"no node in site {site!r}; sites: {sites}")
    if reason is Reason.SITE_EXCLUDED:
        left = [x for x in state.sites if x not in req.exclude_sites]
        return (
            Miss(
                "site",
                f"no node outside {', '.join(req.exclude_sites)} can hold it; sites: {sites}",
            )
            if left
            else Miss("site", f"every site of the pool is excluded; sites: {sites}")
        )
    where = " or ".join(req.sites)
    return Miss("site", f"no node in site {where} can hold it; sites: {sites}")


def _runtime_miss(state: ClusterState, near: BoolArray, kinds: str) -> Miss:
    """An image job whose closest nodes have no container runtime: where the runtimes are, so
    the user can ask for those cards or an operator can add a runtime where the cards are."""
    having = np.flatnonzero(state.node_container)
    if not having.size:
        return Miss("image", "no node of the pool has a container runtime")
    shown = []
    for i in having[:4].tolist():
        on = _models(state, state.dev_present & (np.arange(state.n_nodes) == i)[:, None])
        shown.append(f"{state.node_names[i]} ({on or 'no cards'})")
    more = ", ..." if having.size > 4 else ""
    whose = f"with {kinds} cards " if kinds else "that fits it "
    return Miss(
        "image",
        f"no node {whose}has a container runtime; nodes with one: {', '.join(shown)}{more}",
    )


def _models(state: ClusterState, mask: BoolArray) -> str:
    """The printed models of the devices in ``mask``, at most four, for a message."""
    ids = sorted({int(i) for i in np.unique(state.dev_model[mask]) if i >= 0})
    names = [state.models[i][1] for i in ids]
    return ", ".join(names[:4]) + (", ..." if len(names) > 4 else "")


# selector checks: when some node has matching cards but too few, the count is the miss
_SELECTORS = frozenset({Reason.CARD_MEMORY, Reason.SOFTWARE_UNSUPPORTED, Reason.UUID_NOT_ALLOWED})
_FIELDS: dict[Reason, str] = {
    Reason.VENDOR_NOT_ALLOWED: "devices.vendors",
    Reason.MODEL_NOT_ALLOWED: "devices.models",
    Reason.UUID_NOT_ALLOWED: "devices.uuids",
    Reason.SHARE_MODE: "devices.share_modes",
    Reason.PARTITION_PROFILE: "devices.partition",
    Reason.CARD_MEMORY: "devices.card_memory",
    Reason.SOFTWARE_UNSUPPORTED: "devices.software",
    Reason.DRIVER_TOO_OLD: "devices.software",
    Reason.DRIVER_TOO_NEW: "devices.software",
    Reason.DRIVER_UNKNOWN: "devices.software",
    Reason.PHYSICAL_CAPACITY: "qos",  # a guaranteed share larger than any card physically is
}
