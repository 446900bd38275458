"""Choosing a site for a job that names no single site: one what-if per site, ranked by one rule.

For each site open to the job (``gang_sites.open_sites``) the engine says whether it fits there
now: one filter pass over the pool for a job of one replica, else a placement in a transaction
that is rolled back (every replica, a gang within the site), so the answer is the engine's own and
nothing changes. A site that could never hold it, even empty, is left out. Sites are then ranked
by, in order:

1. the job's stated preference (``prefer-site=``): the preferred site first;
2. the expected start delay, ``wait + transfer``: the time its dataset takes to reach the site
   (``model/site_network.py``; 0 when local) plus the expected wait there (below). So a job goes
   to a far site only when the wait it saves is larger than the transfer, and at equal delay the
   site with less data to move wins (3);
3. the transfer alone;
4. the fragmentation the placement adds (the FGD measure of the target workload,
   ``fragmentation/``; 0 without one): for one replica, the least any node and card of the site
   that fits would add (FGD's own evaluation, one vectorised pass over the fitting nodes); for
   more, what the rolled-back placement adds on the nodes it took. It is measured only where it
   decides, for the sites tied with the best on the keys before it, so a choice of one replica
   costs one filter pass, and one evaluation when sites tie;
5. the load (the share of the site's card compute allocated).

The wait estimator, exact and named: **expected wait = (the job's position in the site's queue
for its shape) x (the mean run time of that shape)**. The position is 0 where it fits now, else 1
plus the jobs of the same shape already queued for that site (the caller counts them). The mean
run time is learned from finished jobs of the shape (:class:`RunTimes`); with no history of the
shape, the job's own ``max_runtime`` when it gives one; else :data:`NO_HISTORY_RUNTIME_S`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np

from xpupool.engine.context import Context
from xpupool.engine.engine import Engine
from xpupool.engine.fragmentation.after import AfterPlacement
from xpupool.engine.fragmentation.measure import ShapeKey, TargetWorkload, shape_key
from xpupool.engine.gang_sites import open_sites, within_sites
from xpupool.engine.verdict import Verdicts
from xpupool.model.request import Request
from xpupool.model.site_network import SiteNetwork, Transfer

__all__ = [
    "NO_HISTORY_RUNTIME_S",
    "RunTimes",
    "SiteChoice",
    "SiteChooser",
    "SiteOption",
    "expected_wait_s",
]

NO_HISTORY_RUNTIME_S = 3600.0
"""The mean run time assumed for a shape with no finished job and no ``max_runtime``: one hour,
so that a queue of unknown work is not taken for a free site."""


class RunTimes:
    """The mean run time per shape (``measure.shape_key``) of the jobs that finished."""

    def __init__(self) -> None:
        self._total_s: dict[ShapeKey, float] = {}
        self._count: dict[ShapeKey, int] = {}

    def record(self, req: Request, seconds: float) -> None:
        """``req``'s job ran ``seconds`` (a finished run; a negative or NaN value is ignored)."""
        if not seconds >= 0:
            return
        key = shape_key(req)
        self._total_s[key] = self._total_s.get(key, 0.0) + seconds
        self._count[key] = self._count.get(key, 0) + 1

    def learned(self, req: Request) -> tuple[float, int] | None:
        """The mean run time of ``req``'s shape and of how many finished runs, or None with no
        history of the shape (the moves to faster cards weigh only a learned one)."""
        key = shape_key(req)
        n = self._count.get(key, 0)
        return (self._total_s[key] / n, n) if n else None

    def mean_s(self, req: Request, max_runtime_s: float | None = None) -> tuple[float, str]:
        """The mean run time to count for ``req``'s shape and where it comes from (for events)."""
        found = self.learned(req)
        if found is not None:
            return found[0], f"mean of {found[1]} runs of its shape"
        if max_runtime_s is not None:
            return float(max_runtime_s), "its max_runtime"
        return NO_HISTORY_RUNTIME_S, "no history of its shape"


def expected_wait_s(position: int, mean_runtime_s: float) -> float:
    """The wait estimator: position in the site's queue for the shape x mean run time."""
    return position * mean_runtime_s


@dataclass(frozen=True, slots=True)
class SiteOption:
    """How one site would take the job (see the module docstring for each figure)."""

    site: str
    preferred: bool
    fits_now: bool
    nodes: int  # nodes the what-if placed its replicas on (0 when it does not fit now)
    position: int  # in the site's queue for its shape; 0 when it fits now
    wait_s: float
    runtime_s: float  # the mean run time the wait counts
    runtime_from: str
    transfer: Transfer | None  # None: the job names no dataset
    fragment_milli: float  # fragmentation the placement adds, thousandths of a card
    load: float  # 0..1

    @property
    def transfer_s(self) -> float:
        return 0.0 if self.transfer is None else self.transfer.seconds

    @property
    def delay_s(self) -> float:
        """Expected start delay: wait + transfer."""
        return self.wait_s + self.transfer_s

    def rank(self) -> tuple[bool, float, float, float, float]:
        return (not self.preferred, self.delay_s, self.transfer_s, self.fragment_milli, self.load)

    def describe(self) -> str:
        """One line with the numbers: ``site shanghai: fits on 2 nodes, data 137 s for 400 GiB
        at 25 Gbit/s from beijing``."""
        if self.fits_now:
            where = f"fits on {self.nodes} node{'s' if self.nodes != 1 else ''}"
        else:
            where = (
                f"queued at {self.position} for its shape, wait {self.wait_s:.0f} s "
                f"({self.position} x {self.runtime_s:.0f} s, {self.runtime_from})"
            )
        if self.transfer is None:
            data = "no dataset"
        elif self.transfer.local:
            data = "data 0 s"
        elif self.transfer.source is None:
            data = f"data {self.transfer.dataset.name} cannot reach it (no link)"
        else:
            t = self.transfer
            data = (
                f"data {t.seconds:.0f} s for {t.gib:g} GiB at {t.bandwidth_gbps:g} Gbit/s "
                f"from {t.source}"
            )
        extra = ", preferred" if self.preferred else ""
        return f"site {self.site}: {where}, {data}{extra}, load {self.load:.0%}"


@dataclass(frozen=True, slots=True)
class SiteChoice:
    """The sites ranked best first (at least one), and the events that say why."""

    options: tuple[SiteOption, ...]

    @property
    def chosen(self) -> SiteOption:
        return self.options[0]

    @property
    def runner_up(self) -> SiteOption | None:
        return self.options[1] if len(self.options) > 1 else None

    def events(self) -> list[str]:
        """The choice and the runner-up, each with its numbers."""
        lines = [f"chose {self.chosen.describe()}"]
        if self.runner_up is not None:
            lines.append(f"runner-up {self.runner_up.describe()}")
        return lines


class SiteChooser:
    """Ranks the sites of one engine's pool for a request (the module docstring gives the rule).

    ``workload`` is the target workload of the fragmentation measure; None: the engine's own
    (``Engine.placement_measure``: the one its profile places by, whose cache of fragmentation
    after placement the choice and the placements share, so neither computes twice what the
    other did), or, when its profile has none, fragmentation counts 0 and the ranking goes from
    transfer to load. Holds a verdict cache (and, with ``workload``, a fragmentation cache) over
    ``engine``'s state: make a new chooser when the engine is rebuilt."""

    def __init__(
        self,
        engine: Engine,
        network: SiteNetwork | None = None,
        runtimes: RunTimes | None = None,
        workload: TargetWorkload | None = None,
    ) -> None:
        self.engine = engine
        self.network = network or SiteNetwork()
        self.runtimes = runtimes or RunTimes()
        self._verdicts = Verdicts(engine.state, engine.filters_off)
        self._own = (
            None if workload is None else AfterPlacement(engine.fragmentation_cache(workload))
        )
        self._taking: tuple[int, frozenset[str]] = (-1, frozenset())  # (epoch, sites)

    def warm(self) -> None:
        """Build now what the first choices would (the empty twin of the verdicts, the
        fragmentation of every node), not in the middle of a pass."""
        self._verdicts.warm()
        after = self._after()
        if after is not None:
            after.frag.current()

    def _after(self) -> AfterPlacement | None:
        """The fragmentation measure and its cache of fragmentation after placement (see the
        class docstring), or None."""
        return self._own if self._own is not None else self.engine.placement_measure()

    def applies(self, req: Request) -> bool:
        """Whether there is a choice to make: more than one site of the pool is open to it."""
        return len(self._open_sites(req)) > 1

    def takes_work(self, site: str) -> bool:
        """Whether some node of ``site`` takes new work: a site none of whose nodes does (all
        cordoned: drained; all lost: unreachable) is never chosen, whatever it could hold."""
        state = self.engine.state
        if self._taking[0] != state.epoch:
            per_site = np.bincount(state.node_site[state.node_ok], minlength=len(state.sites))
            taking = frozenset(s for s, n in zip(state.sites, per_site.tolist(), strict=True) if n)
            self._taking = (state.epoch, taking)
        return site in self._taking[1]

    def _open_sites(self, req: Request) -> list[str]:
        """The sites open to ``req`` that take new work (:meth:`takes_work`)."""
        return [s for s in open_sites(self.engine.state, req) if self.takes_work(s)]

    def choose(
        self,
        req: Request,
        queued: Mapping[str, int] | None = None,
        max_runtime_s: float | None = None,
    ) -> SiteChoice | None:
        """The sites open to ``req`` ranked, or None when fewer than two are open or none could
        ever hold it. ``queued[site]``: the jobs of ``req``'s shape already queued for that site.
        Raises :class:`~xpupool.model.errors.RequestError` at ``data`` for an unknown dataset."""
        if req.data is not None:
            self.network.dataset(req.data)  # refused before any what-if
        sites = self._open_sites(req)
        if len(sites) < 2:
            return None
        queued = queued or {}
        runtime_s, runtime_from = self.runtimes.mean_s(req, max_runtime_s)
        single = req.replicas == 1
        ctx = self.engine.feasible(req) if single else None
        measure = None if single else self._after()
        base = None if measure is None else measure.frag.current().copy()
        options: list[SiteOption] = []
        for site in sites:
            if ctx is not None:  # one replica: the filter pass says where it fits now
                fits = bool((ctx.node_fit & self.engine.state.site_mask((site,))).any())
                nodes, fragment = int(fits), 0.0
                never = not fits and site not in self._verdicts.sites_that_fit(req)
            else:
                one = within_sites(req, (site,))
                fits, nodes, fragment = self._what_if(one, measure, base)
                never = not fits and self._verdicts.never_fits(one) is not None
            if never:
                continue
            transfer = None if req.data is None else self.network.transfer(req.data, site)
            if transfer is not None and math.isinf(transfer.seconds):
                continue  # its data cannot reach the site
            position = 0 if fits else 1 + queued.get(site, 0)
            options.append(
                SiteOption(
                    site=site,
                    preferred=site == req.preferred_site,
                    fits_now=fits,
                    nodes=nodes,
                    position=position,
                    wait_s=expected_wait_s(position, runtime_s),
                    runtime_s=runtime_s,
                    runtime_from=runtime_from,
                    transfer=transfer,
                    fragment_milli=fragment,
                    load=self._load(site),
                )
            )
        if not options:
            return None
        options.sort(key=SiteOption.rank)
        if ctx is not None:
            tied = [o for o in options if o.rank()[:3] == options[0].rank()[:3] and o.fits_now]
            if len(tied) > 1:  # fragmentation decides between them: measure it
                least = self._least_fragment(ctx)
                measured = {o.site: replace(o, fragment_milli=least[o.site]) for o in tied}
                options = [measured.get(o.site, o) for o in options]
                options.sort(key=SiteOption.rank)
        return SiteChoice(tuple(options))

    def _what_if(
        self, req: Request, measure: AfterPlacement | None, base: np.ndarray | None
    ) -> tuple[bool, int, float]:
        """Whether ``req`` fits now, on how many nodes, and the fragmentation it adds there;
        placed in a transaction that is rolled back."""
        with self.engine.transaction() as trial:
            placed = self.engine.place(req, txn=trial)
            if not placed.ok:
                return False, 0, 0.0
            nodes = np.unique([a.node_index for a in placed.allocations])
            fragment = 0.0
            if measure is not None and base is not None:
                after = measure.frag.current()
                fragment = float((after[nodes] - base[nodes]).sum())
            trial.rollback()
        return True, int(nodes.size), fragment

    def _least_fragment(self, ctx: Context) -> dict[str, float]:
        """Per site, the least fragmentation one replica of ``ctx`` (filtered) would add on any
        of its fitting nodes and cards (0 for all without a target workload)."""
        state = self.engine.state
        out = dict.fromkeys(state.sites, 0.0)
        measure = self._after()
        if measure is None:
            return out
        seen = measure.evaluate(ctx)
        nodes = seen.candidates
        after = seen.after.frag_after[nodes]
        if after.ndim == 2:  # per card: the best card that fits
            assert ctx.dev_fit is not None
            after = np.where(ctx.dev_fit[nodes], after, np.inf).min(axis=1)
        added = after - seen.before[nodes]
        site_of = state.node_site[nodes]
        for i, site in enumerate(state.sites):
            mine = added[site_of == i]
            if mine.size:
                out[site] = float(mine.min())
        return out

    def _load(self, site: str) -> float:
        state = self.engine.state
        mask = state.site_mask((site,))
        total = float(state.node_dev_core_total[mask].sum())
        return 0.0 if not total else 1.0 - float(state.node_dev_core_free[mask].sum()) / total
