"""xpupool's default placement policy: FGD at half resolution with the fullest card among equals for
one-device replicas, shares placed where the workload's best packing would put them, CPU-aware
when the workload is CPU-bound, with contended cards priced and CPU-only replicas sent where CPU
is spare; and among the near-best nodes, the one after which the likeliest next tasks still land
best (a one-step lookahead).

Per candidate node ``n`` (and, for one-device replicas, per fitting card ``d`` of it):

    F(n)      = FGD's expected fragmentation of the target workload
                (``engine/fragmentation/measure.py``); when the workload is CPU-bound, each shape's
                usable idle compute is capped by how many tasks of that shape the node's free CPU
                and memory still admit (``measure.cpu_capped``): idle GPUs that no CPU is left to
                feed are stranded
    displaced = contended demand the replica takes: ``c * min(1, rho(d) - rho_min)``, ``rho`` the
                card's pressure (``engine/fragmentation/pressure.py``), ``rho_min`` the least over
                the cards it fits
    primary   = 2 * floor(50 * sigmoid((F_before - F_after) / 1000))     in 0, 2, ..., 98
    tight     = 0.01 * (1 - free compute left on d after placement / 1000)
    loss      = what a share of ``s`` gives up in the gap ``h`` free on ``d``, in cards, at the
                cutting-stock prices of the workload's shares (``engine/fragmentation/prices.py``):
                ``K(h) - K(s) - K(h - s)``, 0 where ``s`` belongs to a best filling of ``h``
    score     = primary + tight - SLOPE * displaced - PACK * loss    one-device replica (best card)
                (fine resolution: FGD's own score - SLOPE * displaced, no tight, no loss)
    score     = floor(100 * sigmoid((F_before - F_after) / 1000))  others (FGD's own score)
                - SLOPE * k * displaced (least contended fitting card)
                + CPU_TIE * spare CPU (0..1)         CPU-only replicas, workload not CPU-bound

FGD's own score is ``floor(100 * sigmoid(...))``; half its resolution makes fragmentation deltas within
about 80 thousandths of a GPU equal: near-equal nodes go to the engine's seeded node order, and inside
a node near-equal cards to the fullest. Replicas of several cards (or none) keep FGD's resolution,
where coarser scores measurably lost. ``PACK`` makes any packing loss outweigh FGD's whole range:
a share goes where it joins a best filling of the card's gap (a 0.32 beside a 0.65, not in the
0.53 beside a 0.47), and FGD decides among the cards where it loses nothing. ``SLOPE`` is FGD's
sigmoid's slope at 0, so displaced demand counts as that much more fragment: FGD alone happily
spends the cards that jobs constrained to them need, because idle capacity others cannot use looks
like fragment to it. A CPU-only replica changes no node's GPU fragmentation; among nodes FGD rates
equal it goes to the one with the most CPU beyond what its idle devices will need (the workload's
CPU per unit of device compute), except when the workload is CPU-bound, where the cap already
weighs CPU.

The score is greedy: it rates what a placement does to the node's fragmentation now. Among the best
``CANDIDATES`` nodes within ``LOOK_SLACK`` of the best score (the engine's seeded order among
equals), each with the cards its score chose, the one the lookahead
(``engine/fragmentation/lookahead.py``) values most is chosen: its FGD delta plus, for each of
the likeliest next device shapes, the shape's weight times its best FGD delta anywhere in the fleet
after this placement. It applies to every replica (one card, several, or CPU only), and is a
declared post-score step (:meth:`Xpupool.post_score`): the engine runs it on the weighted sum, from
what the score kept in the request's cycle state.
``xpupool-fine`` uses FGD's own resolution for one-card replicas, ``xpupool-greedy`` has no
lookahead (both for comparison).

The engine sees the score squashed into 0..100 (``scorers/base.py`` ``squash``, centred on
``SQUASH_MIDDLE``, FGD's "no change", with slope set by ``SQUASH_SCALE``): strictly increasing, so
xpupool alone chooses exactly as with the raw score, and weighted beside other scorers it counts on
their scale.

The workload is CPU-bound when it asks for at least ``CPU_BOUND`` of the fleet's CPU per unit of
device compute, i.e. CPU would run out about when the devices fill. The measurements behind every
choice are in ``docs/placement-policy.md``.

Without a target workload (the embedded server, the Kubernetes extender) the scorer learns one from
the last 10,000 requests the engine was asked to place, placed or refused (the engine tells it each
through :meth:`Xpupool.observe` once the request is decided), FGD's way (the most popular shapes
covering 95 % of them), re-learning whenever a quarter of what it knew is new: after 1, 2, 3, 4, 5,
7, 9, ... requests, then every 2,000 once the window is full; the lookahead follows the workload
learned.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import numpy as np

from xpupool.engine.context import Context
from xpupool.engine.fragmentation.after import AfterPlacement
from xpupool.engine.fragmentation.cache import FragmentationCache
from xpupool.engine.fragmentation.lookahead import CANDIDATES, SHAPES, Lookahead
from xpupool.engine.fragmentation.measure import IndexArray, TargetWorkload
from xpupool.engine.fragmentation.pressure import DevicePressure
from xpupool.engine.fragmentation.prices import SharePrices
from xpupool.engine.scorers.base import PluginArgs, ScorerEnv, squash
from xpupool.engine.scorers.fgd import Fgd
from xpupool.engine.state import BoolArray, ClusterState, FloatArray, IntArray
from xpupool.model.request import Request

STEPS = 50  # primary score levels for a one-device replica (FGD has 100)
STEPS_NODE = 100  # and for others, which have no card tie-break to decide near-ties: FGD's
TIGHT = 0.01  # weight of the fullest-card tie-break (below one primary step of 2)
CPU_BOUND = 0.95  # workload CPU per device compute, as a share of the fleet's, that makes CPU bind
SLOPE = 0.025  # score points per thousandth of displaced demand: FGD's sigmoid's slope at 0
CPU_TIE = 0.5  # weight of the spare-CPU tie-break for CPU-only replicas (below one score step)
RELEARN_AFTER = 0.25  # re-learn the online workload after this share of the window is new
PACK = 100.0  # score points per card of packing loss: any loss outweighs FGD's whole range
LOOK_SLACK = 1.0  # score points below the best within which the lookahead compares candidates
WINDOW = 10_000  # the online workload is estimated from the last this many requests
SQUASH_MIDDLE = 50.0  # raw score that maps to 50 of 0..100 (FGD's "no change")
SQUASH_SCALE = 25.0  # raw points per unit of the logistic: 0..100 raw maps to about 12..88


@dataclass(frozen=True, slots=True)
class XpupoolArgs(PluginArgs):
    """The scorer's switches and constants, settable in a profile's ``pluginConfig``; the defaults
    are the module's constants above, where each is explained. ``fine``: FGD's resolution for
    one-device replicas instead of half; ``lookahead``: the one-step lookahead over the likeliest
    next shapes; ``candidates`` and ``shapes``: how many near-best nodes and next shapes it
    compares (``engine/fragmentation/lookahead.py``)."""

    fine: bool = False
    lookahead: bool = True
    steps: int = STEPS
    steps_node: int = STEPS_NODE
    tight: float = TIGHT
    cpu_bound: float = CPU_BOUND
    slope: float = SLOPE
    cpu_tie: float = CPU_TIE
    relearn_after: float = RELEARN_AFTER
    pack: float = PACK
    look_slack: float = LOOK_SLACK
    window: int = WINDOW
    candidates: int = CANDIDATES
    shapes: int = SHAPES

    def __post_init__(self) -> None:
        counts = {"steps": self.steps, "steps_node": self.steps_node, "window": self.window}
        counts |= {"candidates": self.candidates, "shapes": self.shapes}
        for name, value in counts.items():
            if value < 1:
                raise ValueError(f"{name} must be at least 1, got {value}")
        for name in ("tight", "cpu_bound", "slope", "cpu_tie", "relearn_after", "pack"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.look_slack < 0:
            raise ValueError(f"look_slack must be >= 0, got {self.look_slack}")


class Xpupool(Fgd):
    name: ClassVar[str] = "xpupool"
    default_args: ClassVar[XpupoolArgs] = XpupoolArgs()

    def __init__(self, env: ScorerEnv) -> None:
        args = env.args if isinstance(env.args, XpupoolArgs) else self.default_args
        self.args = args
        self.fine = args.fine
        self.look = args.lookahead
        self._online = env.workload is None
        self._seen: deque[Request] = deque(maxlen=args.window)
        self._new = 0  # requests seen since the workload was last learned
        self._pressure: DevicePressure | None = None
        workload = env.workload or TargetWorkload((), ())
        self._cpu_per_compute = cpu_per_compute(workload)
        super().__init__(
            env, workload, capped=cpu_bound(workload, env.pipeline.state, args.cpu_bound)
        )
        self._prices = share_prices(workload)
        self._lookahead = Lookahead(self.frag, args.shapes) if self.look else None
        if self._lookahead is not None and self._lookahead.active:
            self.frag.current()  # every node's next-shape deltas, once, before placing
            self._lookahead.update(env.pipeline.state)

    @property
    def prices(self) -> SharePrices | None:
        """The cutting-stock prices of the target workload's shares (None when it has none)."""
        return self._prices

    def describe(self) -> str:
        """What the scorer uses for this engine: its resolution, its lookahead and the target
        workload (given, or learned from the requests)."""
        resolution = "FGD's resolution" if self.fine else "half resolution"
        source = "learned online" if self._online else "given"
        parts = [f"{resolution} for one-card replicas"]
        if self._prices is not None:
            n = self._prices.sizes.size
            parts.append(f"shares priced by the best packing of {n} size{'s' if n > 1 else ''}")
        if self._lookahead is not None:
            parts.append(self._lookahead.describe())
        parts.append(f"target workload {source}" + (", CPU-capped" if self.frag.capped else ""))
        return f"{self.name}: " + "; ".join(parts)

    def score(self, ctx: Context) -> FloatArray:
        """The raw score below (about -2000..100.5: penalties push it under FGD's range)
        squashed into 0..100, the same order and ties."""
        raw = self.raw_score(ctx)
        candidates = np.flatnonzero(ctx.node_fit)
        bounded = np.zeros_like(raw)
        bounded[candidates] = squash(raw[candidates], SQUASH_MIDDLE, SQUASH_SCALE)
        return bounded

    def post_score(self, ctx: Context, candidates: IntArray, total: FloatArray) -> int | None:
        """The lookahead, a declared post-score step: among the near-best by this scorer's own
        points (kept in ``ctx.cycle`` by :meth:`raw_score`), the node after which the likeliest
        next tasks land best; None when it does not look (one candidate, no next shapes, or
        candidates it cannot tell apart)."""
        kept = ctx.cycle.get(self.name)
        if not isinstance(kept, _LookInputs) or not self._looking(candidates):
            return None
        return self._look_ahead(ctx, *kept)

    def raw_score(self, ctx: Context) -> FloatArray:
        """The unbounded score (see the module docstring), before the squash: for reports and
        tests that reason in its points."""
        state = ctx.state
        seen = self.after.evaluate(ctx)
        before, cached, candidates, stale = seen.before, seen.after, seen.candidates, seen.stale
        scores = np.zeros(state.n_nodes, np.float64)
        if not candidates.size:
            return scores
        displaced = self._displaced(ctx, candidates)
        # The score of a node (per card) depends only on its state: recompute where it changed.
        if cached.score is None:
            cached.score = np.zeros_like(cached.frag_after)
            stale = candidates
        if stale.size:
            cached.score[stale] = _score(
                ctx, before, cached.frag_after, stale, self.args, self._prices
            )
        if cached.score.ndim == 1:
            scores[candidates] = cached.score[candidates]
            if displaced is not None:
                if displaced.ndim == 2:  # per card: a node's least contended fitting cards
                    assert ctx.dev_fit is not None  # set for every replica that needs devices
                    displaced = np.where(ctx.dev_fit[candidates], displaced, np.inf).min(axis=1)
                scores[candidates] -= self.args.slope * ctx.k * displaced
            elif ctx.k == 0 and not self.frag.capped:  # capped, F already weighs CPU
                spare = _spare_cpu(state, candidates, self._cpu_per_compute)
                scores[candidates] += self.args.cpu_tie * spare
            ctx.cycle[self.name] = _LookInputs(scores, None, candidates, before, cached.frag_after)
            return scores
        # One device: the best card per node (the fullest among equals); the node takes its score.
        assert ctx.dev_fit is not None
        per_device = np.where(ctx.dev_fit[candidates], cached.score[candidates], -np.inf)
        if displaced is not None and displaced.ndim == 2:
            per_device = per_device - self.args.slope * displaced
        best = np.argmax(per_device, axis=1)
        columns = np.full(state.n_nodes, -1, np.int64)
        columns[candidates] = best
        scores[candidates] = per_device[np.arange(candidates.size), best]
        if displaced is not None and displaced.ndim == 1:  # the same for every card of a node
            scores[candidates] -= self.args.slope * displaced
        ctx.cycle[self.name] = _LookInputs(scores, columns, candidates, before, cached.frag_after)
        self._columns = (ctx, columns)
        return scores

    def _looking(self, candidates: IndexArray) -> bool:
        return self._lookahead is not None and candidates.size > 1 and self._lookahead.active

    def _look_ahead(
        self,
        ctx: Context,
        scores: FloatArray,
        columns: IntArray | None,
        candidates: IndexArray,
        before: FloatArray,
        frag_after: FloatArray,
    ) -> int | None:
        """Among the best ``CANDIDATES`` nodes within ``LOOK_SLACK`` of the best score (seeded
        order among equals), each with the cards its score chose (``columns`` for one card, the
        first ``k`` that fit for several), the one the lookahead prefers
        (``engine/fragmentation/lookahead.py``); None when fewer than two are near the best or
        they are alike (the engine's order then decides, as it would)."""
        assert self._lookahead is not None
        state = ctx.state
        top = float(scores[candidates].max())
        pool = candidates[scores[candidates] >= top - self.args.look_slack]
        if pool.size < 2:
            return None
        pool = pool[np.lexsort((state.rank[pool], -scores[pool]))][: self.args.candidates]
        taken = np.zeros((pool.size, state.width), np.bool_)
        if columns is not None:
            taken[np.arange(pool.size), columns[pool]] = True
            gain = before[pool] - frag_after[pool, columns[pool]]
        else:
            if ctx.k:
                assert ctx.dev_fit is not None
                fit = ctx.dev_fit[pool]
                taken = fit & (np.cumsum(fit, axis=1) <= ctx.k)
            gain = before[pool] - frag_after[pool]
        if _twins(state, self.frag.table.node_kind, pool, taken):
            return None  # equal values: the lookahead would keep the first, as the engine does
        need = ctx.need_mib if isinstance(ctx.need_mib, int) else ctx.need_mib[pool]
        values = self._lookahead.values(
            state,
            pool,
            taken * ctx.need_core,
            np.where(taken, need, 0),
            taken,
            gain,
            ctx.req.cpu_milli,
            ctx.req.memory_mib,
        )
        return int(pool[int(np.argmax(values))])

    def _displaced(self, ctx: Context, candidates: IndexArray) -> FloatArray | None:
        """Thousandths of contended demand the replica would take from shapes with fewer places to
        go (``DevicePressure.displaced``: ``[S]`` per node, or ``[S, W]`` per card on nodes with
        cards of several classes); None when nothing is contended."""
        if ctx.k == 0 or ctx.dev_fit is None:
            return None
        table = self.frag.table
        if self._pressure is None or self._pressure.table is not table:
            self._pressure = DevicePressure(ctx.state, table)
        if not self._pressure.active:
            return None
        return self._pressure.displaced(candidates, ctx.dev_fit, ctx.need_core)

    def observe(self, req: Request, placed: bool) -> None:
        """Online target workload: FGD's estimate from the requests seen lately, refused ones
        too (what fits nowhere now is still what the workload asks for)."""
        if not self._online:
            return
        self._seen.append(req)
        self._new += 1
        if self._new >= max(1.0, self.args.relearn_after * (len(self._seen) - self._new)):
            self._new = 0
            state = self.frag.state
            workload = TargetWorkload.from_requests(self._seen)
            capped = cpu_bound(workload, state, self.args.cpu_bound)
            self._cpu_per_compute = cpu_per_compute(workload)
            self._prices = share_prices(workload)
            self.frag = FragmentationCache(state, self.frag.pipeline, workload, capped)
            self.after = AfterPlacement(self.frag)
            if self._lookahead is not None:
                self._lookahead = Lookahead(self.frag, self.args.shapes)


class _LookInputs(NamedTuple):
    """What :meth:`Xpupool.raw_score` keeps in ``ctx.cycle`` for its post-score step: its raw
    scores, the card it chose per node (one-card replicas), the candidates, and the fragmentation
    before and after."""

    scores: FloatArray
    columns: IntArray | None
    candidates: IndexArray
    before: FloatArray
    frag_after: FloatArray


class XpupoolFine(Xpupool):
    """xpupool with FGD's own resolution and card choice for one-device replicas."""

    name: ClassVar[str] = "xpupool-fine"
    default_args: ClassVar[XpupoolArgs] = XpupoolArgs(fine=True)


class XpupoolGreedy(Xpupool):
    """xpupool without the lookahead: each replica placed for the fragmentation it causes now."""

    name: ClassVar[str] = "xpupool-greedy"
    default_args: ClassVar[XpupoolArgs] = XpupoolArgs(lookahead=False)


def cpu_bound(workload: TargetWorkload, state: ClusterState, share: float = CPU_BOUND) -> bool:
    """Does ``workload`` ask for at least ``share`` of the CPU the fleet's device nodes have per
    unit of device compute? Then CPU, not devices, is what strands capacity, and fragmentation is
    CPU-capped."""
    cpu, _, compute = _cpu_and_compute(workload)
    with_devices = state.dev_present.any(axis=1)  # a device task's CPU comes from its own node
    fleet_compute = float(state.dev_present.sum()) * 1000.0
    fleet_cpu = float(state.node_cpu_total[with_devices].sum())
    if compute <= 0 or fleet_compute <= 0 or fleet_cpu <= 0:
        return False
    return (cpu / compute) >= share * (fleet_cpu / fleet_compute)


def cpu_per_compute(workload: TargetWorkload) -> float:
    """CPU (thousandths of a core) the workload's device tasks ask per thousandth of device compute."""
    _, device_cpu, compute = _cpu_and_compute(workload)
    return device_cpu / compute if compute else 0.0


def _cpu_and_compute(workload: TargetWorkload) -> tuple[float, float, float]:
    """Expected CPU per task (all shapes, and device shapes only) and device compute per task."""
    cpu = device_cpu = compute = 0.0
    for shape, weight in zip(workload.shapes, workload.weights, strict=True):
        d = shape.devices
        cpu += weight * shape.cpu_milli
        if d.count:
            device_cpu += weight * shape.cpu_milli
            compute += weight * d.count * (d.need_core_permille or 1000)
    return cpu, device_cpu, compute


def _twins(state: ClusterState, node_kind: IntArray, pool: IndexArray, taken: BoolArray) -> bool:
    """Are the candidates alike in everything the lookahead sees (kind, free and total card
    capacity, usable cards, free CPU and memory, the cards taken)? Then their values are equal."""
    first = pool[0]
    return bool(
        (taken == taken[0]).all()
        and (node_kind[pool] == node_kind[first]).all()
        and (state.node_cpu_free[pool] == state.node_cpu_free[first]).all()
        and (state.node_mem_free[pool] == state.node_mem_free[first]).all()
        and (state.dev_core_free[pool] == state.dev_core_free[first]).all()
        and (state.dev_mem_free[pool] == state.dev_mem_free[first]).all()
        and (
            not state.tasks_limited
            or (state.dev_task_free[pool] == state.dev_task_free[first]).all()
        )
        and (state.dev_mem_total[pool] == state.dev_mem_total[first]).all()
        and (state.dev_usable[pool] == state.dev_usable[first]).all()
    )


def _spare_cpu(state: ClusterState, nodes: IndexArray, per_compute: float) -> FloatArray:
    """``[S]`` in 0..1, increasing in the CPU a node has beyond what its idle devices will need
    (``per_compute`` per thousandth of idle compute): where a CPU-only replica strands least."""
    spare = state.node_cpu_free[nodes] - per_compute * state.node_dev_core_free[nodes]
    low, high = float(spare.min()), float(spare.max())
    result: FloatArray = (spare - low) / (high - low) if high > low else np.zeros(nodes.size)
    return result


def share_prices(workload: TargetWorkload) -> SharePrices | None:
    """Cutting-stock prices of the workload's one-card shares (None when it has none)."""
    frequencies: dict[int, float] = {}
    for shape, weight in zip(workload.shapes, workload.weights, strict=True):
        d = shape.devices
        share = d.need_core_permille or 0
        if d.count == 1 and 0 < share < 1000:
            frequencies[share] = frequencies.get(share, 0.0) + weight
    prices = SharePrices(frequencies)
    return prices if prices.active else None


def _score(
    ctx: Context,
    before: FloatArray,
    frag_after: FloatArray,
    nodes: IndexArray,
    args: XpupoolArgs,
    prices: SharePrices | None,
) -> FloatArray:
    """Scores of ``nodes`` (``[S]``), or of each of their cards for a one-device replica
    (``[S, W]``, before masking the cards it does not fit): primary, plus the fullest-card term at
    half resolution."""
    if frag_after.ndim == 1:
        return _primary(before[nodes], frag_after[nodes], args.steps_node)
    if args.fine:
        return _primary(before[nodes, None], frag_after[nodes], args.steps_node)
    per_device = _primary(before[nodes, None], frag_after[nodes], args.steps)
    if prices is not None and 0 < ctx.need_core < 1000:  # a share: how it fills the card's gap
        per_device -= args.pack * prices.loss(ctx.state.dev_core_free[nodes], ctx.need_core)
    per_device += args.tight * (1.0 - (ctx.state.dev_core_free[nodes] - ctx.need_core) / 1000.0)
    return per_device


def _primary(before: FloatArray, after: FloatArray, steps: int) -> FloatArray:
    """FGD's sigmoid of the fragmentation delta at ``steps`` levels, on FGD's 0..100 scale."""
    delta = np.clip((before - after) / 1000.0, -50.0, 50.0)
    result: FloatArray = np.floor(steps / (1.0 + np.exp(-delta))) * (100.0 / steps)
    return result
