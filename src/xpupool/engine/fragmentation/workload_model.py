"""The target workload and what is built on it, shared by the plugins of xpupool's policy.

One object per engine (and per :class:`WorkloadArgs`), as kube's framework handle: the shape table
and fragmentation measure, the fragmentation after placement per request amounts, the device
pressure, the share prices and, when no workload is given, the online learner. Each plugin
(``engine/scorers/xpupool/``) reads what it needs from here, so the measure is kept once however
many plugins a profile enables, and the learner is fed once per request (the engine calls
:meth:`WorkloadModel.observe`). What one request computes (the fragmentation before and after,
the displaced demand) is kept in its ``ctx.cycle``, computed by whichever plugin asks first.

Without a target workload (the embedded server, the Kubernetes extender) the model learns one from
the last ``window`` requests the engine was asked to place, placed or refused, FGD's way (the most
popular shapes covering 95 % of them), re-learning whenever ``relearn_after`` of what it knew is
new: after 1, 2, 3, 4, 5, 7, 9, ... requests, then every 2,000 once the window is full. The
window's requests are counted per shape as they enter and leave it (``measure.ShapeCounts``), so a
re-learn does not go over the whole window again. A re-learn that finds the shapes in use with
probabilities moved by at most ``relearn_change`` in all (total variation) keeps what is built
on them: rebuilding the shape table, the measure, the pressure and the lookahead for a workload
that did not change is a pass over every node, and it set the embedded server's p99
(docs/benchmarks.md and its history). A front
that places in batches defers re-learning to the end of each (``deferred``, :meth:`relearn`), and
an engine rebuilt for a changed pool starts from its predecessor's window (``seen``) instead of
learning from nothing again.

The workload is CPU-bound when it asks for at least ``cpu_bound`` of the fleet's CPU per unit of
device compute, i.e. CPU would run out about when the devices fill; the measure is then CPU-capped
(``measure.cpu_capped``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from xpupool.engine.context import Context
from xpupool.engine.eligibility import Eligibility
from xpupool.engine.fragmentation.after import AfterPlacement, Fragmentation
from xpupool.engine.fragmentation.cache import FragmentationCache
from xpupool.engine.fragmentation.measure import (
    IndexArray,
    ShapeCounts,
    TargetWorkload,
    shape_key,
)
from xpupool.engine.fragmentation.pressure import DevicePressure
from xpupool.engine.fragmentation.prices import SharePrices
from xpupool.engine.plugin_args import PluginArgs
from xpupool.engine.state import ClusterState, FloatArray
from xpupool.model.request import Request

CPU_BOUND = 0.95  # workload CPU per device compute, as a share of the fleet's, that makes CPU bind
RELEARN_AFTER = 0.25  # re-learn the online workload after this share of the window is new
RELEARN_CHANGE = 0.05  # ... and rebuild on it only if this much probability moved (or a shape)
WINDOW = 10_000  # the online workload is estimated from the last this many requests
NAME = "workload"  # the model's name in a profile's pluginConfig and in ``ctx.cycle``


@dataclass(frozen=True, slots=True)
class WorkloadArgs(PluginArgs):
    """The shared model's arguments (a profile's ``pluginConfig`` entry ``workload``); the defaults
    are the module's constants, where each is explained."""

    cpu_bound: float = CPU_BOUND
    window: int = WINDOW
    relearn_after: float = RELEARN_AFTER
    relearn_change: float = RELEARN_CHANGE

    def __post_init__(self) -> None:
        if self.window < 1:
            raise ValueError(f"window must be at least 1, got {self.window}")
        for name in ("cpu_bound", "relearn_after", "relearn_change"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")


@dataclass(frozen=True, slots=True)
class _Kept:
    """What one request computed, in its ``ctx.cycle``: the fragmentation, and the displaced
    demand once ``asked``."""

    fragmentation: Fragmentation
    displaced: FloatArray | None = None
    asked: bool = False


class WorkloadModel:
    """The shared state of xpupool's plugins for one engine (see the module docstring)."""

    def __init__(
        self,
        state: ClusterState,
        pipeline: Eligibility,
        workload: TargetWorkload | None,
        args: WorkloadArgs = WorkloadArgs(),
        seen: Iterable[Request] = (),
    ) -> None:
        self.state = state
        self.pipeline = pipeline
        self.args = args
        self.online = workload is None
        self._seen: deque[Request] = deque(maxlen=args.window)
        self._counts = ShapeCounts()  # the shapes of ``_seen``, kept as it slides
        self._new = 0  # requests seen since the workload was last learned
        self.generation = 0  # bumped whenever the workload (and all built on it) is replaced
        self.parts: list[Callable[[], str | None]] = []  # what the plugins say of themselves
        self.warmers: list[Callable[[], None]] = []  # what the plugins build ahead (``warm``)
        self.deferred = False  # re-learn when :meth:`relearn` is called, not in :meth:`observe`
        self.due = False  # a re-learn is due (deferred)
        if self.online:  # an engine rebuilt for a changed pool goes on from its predecessor's
            for req in seen:
                self._admit(req)
            workload = self._counts.workload()
        self._learn(workload or TargetWorkload((), ()))

    def _learn(self, workload: TargetWorkload) -> None:
        self.cpu_per_compute = cpu_per_compute(workload)
        capped = cpu_bound(workload, self.state, self.args.cpu_bound)
        self.frag = FragmentationCache(self.state, self.pipeline, workload, capped)
        self.after = AfterPlacement(self.frag)
        self.prices = share_prices(workload)
        self._pressure: DevicePressure | None = None
        self.generation += 1

    # ------------------------------------------------------------------ per request
    def fragmentation(self, ctx: Context) -> Fragmentation:
        """The request's fragmentation before and after (``after.py``), once per ``ctx``."""
        kept = ctx.cycle.get(NAME)
        if isinstance(kept, _Kept):
            return kept.fragmentation
        seen = self.after.evaluate(ctx)
        ctx.cycle[NAME] = _Kept(seen)
        return seen

    def displaced(self, ctx: Context) -> FloatArray | None:
        """Thousandths of contended demand the replica would take from shapes with fewer places to
        go (``DevicePressure.displaced``: ``[S]`` per candidate node, or ``[S, W]`` per card on
        nodes with cards of several classes); None when nothing is contended. Once per ``ctx``."""
        seen = self.fragmentation(ctx)
        kept = ctx.cycle[NAME]
        assert isinstance(kept, _Kept)
        if kept.asked:
            return kept.displaced
        found = self._displaced(ctx, seen.candidates)
        ctx.cycle[NAME] = _Kept(seen, found, asked=True)
        return found

    def _displaced(self, ctx: Context, candidates: IndexArray) -> FloatArray | None:
        if ctx.k == 0 or ctx.dev_fit is None or not candidates.size:
            return None
        pressure = self._pressure_now()
        if not pressure.active:
            return None
        return pressure.displaced(candidates, ctx.dev_fit, ctx.need_core)

    def _pressure_now(self) -> DevicePressure:
        """The device pressure over the current shape table (built again with a new table)."""
        table = self.frag.table
        if self._pressure is None or self._pressure.table is not table:
            self._pressure = DevicePressure(self.state, table)
        return self._pressure

    # ------------------------------------------------------------------ learning
    def observe(self, req: Request, placed: bool) -> None:
        """Online target workload: FGD's estimate from the requests seen lately, refused ones
        too (what fits nowhere now is still what the workload asks for)."""
        if not self.online:
            return
        self._admit(req)
        self._new += 1
        if self._new >= max(1.0, self.args.relearn_after * (len(self._seen) - self._new)):
            self._new = 0
            self.due = True
            if not self.deferred:
                self.relearn()

    def relearn(self, warm: bool = False) -> None:
        """Learn the workload again if that is due (now, or deferred since); with ``warm``, also
        build now what the next placement would build on a new workload (:meth:`warm`)."""
        if not self.due:
            return
        self.due = False
        learned = self._counts.workload()
        if moved(self.frag.workload, learned) > self.args.relearn_change:
            self._learn(learned)
            if warm:
                self.warm()

    def warm(self) -> None:
        """Build what is built on the workload for the state now, instead of in the next
        placements: every node's measure, the device pressure, what the plugins registered (the
        lookahead's next-shape deltas) and, for each of the workload's shapes, its fragmentation
        after placement on every node it fits (the per-amounts cache, ``after.py``, which a new
        measure starts empty). Each is a function of the state and the workload, kept current
        per node afterwards, so building it here or lazily gives the same values. A front that
        re-learns between placements (the embedded server, when no job waits) calls it so that
        the jobs after a re-learn do not pay for it: otherwise the first placement of each shape
        after one builds it and is several times slower than the next, and a fresh server
        re-learns many times in its first second."""
        self.frag.current()
        pressure = self._pressure_now()
        if pressure.active:
            pressure.current()
        for warmer in self.warmers:
            warmer()
        for shape in self.frag.workload.shapes:  # each shape's fragmentation after placement
            ctx = self.pipeline.context(shape)
            self.pipeline.filter(ctx)
            self.after.evaluate(ctx)

    def _admit(self, req: Request) -> None:
        """Put ``req`` in the window (the oldest leaves a full one)."""
        if len(self._seen) == self._seen.maxlen:
            self._counts.remove(self._seen[0])
        self._seen.append(req)
        self._counts.add(req)

    @property
    def seen(self) -> tuple[Request, ...]:
        """The requests the online workload is learned from (oldest first)."""
        return tuple(self._seen)

    def describe(self) -> str:
        """What the plugins built on this model use, and where its workload came from."""
        parts = [p for p in (part() for part in self.parts) if p]
        source = "learned online" if self.online else "given"
        parts.append(f"target workload {source}" + (", CPU-capped" if self.frag.capped else ""))
        return "xpupool: " + "; ".join(parts)


def moved(old: TargetWorkload, new: TargetWorkload) -> float:
    """How much probability moved from ``old`` to ``new``: their total variation distance over
    shapes (``measure.shape_key``), 1 when a shape came or went."""
    before = {shape_key(s): w for s, w in zip(old.shapes, old.weights, strict=True)}
    after = {shape_key(s): w for s, w in zip(new.shapes, new.weights, strict=True)}
    if before.keys() != after.keys():
        return 1.0
    return 0.5 * sum(abs(after[k] - w) for k, w in before.items())


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
