"""xpupool's default placement policy: FGD with CPU-aware fragmentation, a coarser score, and ties
broken by matching the request's CPU:GPU balance to the node's.

Per candidate node ``n`` (and, for a one-device replica, per device ``d`` of it):

    F'(n)     = FGD's expected fragmentation, with each shape's usable idle compute capped by how
                many tasks of that shape the node's free CPU and memory still admit
                (``fragmentation.cpu_capped``): idle GPUs a node has no CPU left to feed are
                stranded, and FGD alone counts them as usable
    primary   = 2 * floor(50 * sigmoid((F'_before - F'_after) / 1000))   in 0, 2, ..., 98
    balance   = 0.5 + 0.5 * tanh(ln(r_req / r_w)) * tanh(ln(r_node / r_w))   in 0..1
    tight     = 0.01 * (1 - free compute left on d after placement / 1000)
    score     = primary + balance + tight

``r_w`` is the target workload's CPU per unit of device compute, ``r_req`` the request's and
``r_node`` the node's (totals). ``balance`` sends CPU-heavy requests to CPU-rich nodes and CPU-light
ones to CPU-poor nodes, so that neither kind of node runs out of CPU with devices still idle; it only
orders nodes whose primary scores are equal, as does ``tight`` (the fullest fitting device first). The
primary score has half of FGD's resolution: fragmentation deltas within about 80 thousandths of a
device count as equal, and the tie-breaks above decide. The choices and the measurements behind them
are in ``docs/placement-policy.md``.

Without a target workload (the embedded server, the Kubernetes extender) the scorer learns one from
the last 10,000 requests it was asked to place, FGD's way (the most popular shapes covering 95 % of
them), re-learning whenever a quarter of what it knew is new: after 1, 2, 3, 4, 5, 7, 9, ... requests,
then every 2,000 once the window is full.
"""

from __future__ import annotations

import math
from collections import deque
from typing import ClassVar

import numpy as np

from xpupool.engine.context import Context
from xpupool.engine.fragmentation import FragmentationCache, ShapeTable, TargetWorkload
from xpupool.engine.scorers.base import ScorerEnv
from xpupool.engine.scorers.fgd import Fgd
from xpupool.engine.state import FloatArray, IntArray
from xpupool.model.request import Request

STEPS = 50  # primary score levels (FGD has 100)
BALANCE = 0.5  # weight of the CPU:GPU balance tie-break (< one primary step of 2)
TIGHT = 0.01  # weight of the fullest-device tie-break (< the balance resolution that matters)
RELEARN_AFTER = 0.25  # re-learn the online workload after this share of the window is new
WINDOW = 10_000  # the online workload is estimated from the last this many requests


class Xpupool(Fgd):
    name: ClassVar[str] = "xpupool"

    def __init__(self, env: ScorerEnv) -> None:
        self._online = env.workload is None
        self._seen: deque[Request] = deque(maxlen=WINDOW)
        self._new = 0  # requests seen since the workload was last learned
        self._last: Context | None = None
        super().__init__(env, env.workload or TargetWorkload((), ()), capped=True)
        self._ratio_of: ShapeTable | None = None
        self._balance_ratio = 0.0

    def score(self, ctx: Context) -> FloatArray:
        if self._online and ctx is not self._last:
            self._observe(ctx.req)
        self._last = ctx
        state = ctx.state
        before = self.frag.current()  # rebuilds the shape table after a fleet change
        if self._ratio_of is not self.frag.table:
            self._ratio_of = self.frag.table
            self._balance_ratio = _cpu_per_compute(self.frag.table)
        cached = self._cached_for(ctx)
        candidates = np.flatnonzero(ctx.node_fit)
        stale = candidates[cached.version[candidates] != state.node_version[candidates]]
        if stale.size:
            cached.frag_after[stale] = self._evaluate(ctx, self.frag.table, stale)
            cached.version[stale] = state.node_version[stale]
        scores = np.zeros(state.n_nodes, np.float64)
        if not candidates.size:
            return scores
        balance = self._balance(ctx, candidates)
        if cached.frag_after.ndim == 1:
            scores[candidates] = _primary(before[candidates], cached.frag_after[candidates])
            scores[candidates] += balance
            return scores
        # One device: the best device per node, fullest first among equals; the node keeps its score.
        assert ctx.dev_fit is not None
        per_device = _primary(before[candidates, None], cached.frag_after[candidates])
        per_device += TIGHT * (1.0 - (state.dev_core_free[candidates] - ctx.need_core) / 1000.0)
        per_device = np.where(ctx.dev_fit[candidates], per_device, -np.inf)
        best = np.argmax(per_device, axis=1)
        columns = np.full(state.n_nodes, -1, np.int64)
        columns[candidates] = best
        scores[candidates] = per_device[np.arange(candidates.size), best] + balance
        self._columns = (ctx, columns)
        return scores

    # ------------------------------------------------------------------ internals
    def _balance(self, ctx: Context, candidates: IntArray) -> FloatArray | float:
        """``BALANCE * (0.5 + 0.5 tanh(ln(r_req/r_w)) tanh(ln(r_node/r_w)))``, or a constant when
        the request takes no device compute or the workload has no CPU to balance."""
        r_w = self._balance_ratio
        demand = ctx.k * ctx.need_core
        if r_w <= 0 or demand <= 0:
            return BALANCE * 0.5
        s = ctx.state
        r_req = max(ctx.req.cpu_milli, 1) / demand
        r_node = np.maximum(s.node_cpu_total[candidates], 1) / np.maximum(
            s.node_dev_core_total[candidates], 1
        )
        align = math.tanh(math.log(r_req / r_w)) * np.tanh(np.log(r_node / r_w))
        result: FloatArray = BALANCE * (0.5 + 0.5 * align)
        return result

    def _observe(self, req: Request) -> None:
        """Online target workload: FGD's estimate from the requests seen so far."""
        self._seen.append(req)
        self._new += 1
        if self._new >= max(1.0, RELEARN_AFTER * (len(self._seen) - self._new)):
            self._new = 0
            workload = TargetWorkload.from_requests(self._seen)
            self.frag = FragmentationCache(self.frag.state, self.frag.pipeline, workload, True)
            self._cache.clear()


def _primary(before: FloatArray, after: FloatArray) -> FloatArray:
    """FGD's sigmoid of the fragmentation delta at ``STEPS`` levels, on FGD's 0..100 scale."""
    delta = np.clip((before - after) / 1000.0, -50.0, 50.0)
    result: FloatArray = np.floor(STEPS / (1.0 + np.exp(-delta))) * (100.0 / STEPS)
    return result


def _cpu_per_compute(table: ShapeTable) -> float:
    """The workload's CPU millicores per thousandth of device compute (device shapes only)."""
    devices = ~table.cpu_only
    compute = float(
        (table.weights[devices] * table.count[devices] * table.need_core[devices]).sum()
    )
    cpu = float((table.weights[devices] * table.cpu[devices]).sum())
    return cpu / compute if compute > 0 else 0.0
