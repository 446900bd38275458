"""Experiment, not a policy: FGD with a one-step lookahead over the likeliest next shapes.

    python bench/lookahead_experiment.py --trace multigpu40 --seeds 42-45

Among the best one-card candidates (node, card) by FGD's integer score (those within ``--slack`` of
the best, the first ``--candidates`` in the engine's seeded node order), the replica is placed
tentatively; then, for each of the ``--shapes`` likeliest target shapes ``j``, the best FGD delta of
``j`` anywhere in the cluster after it is taken (a ``j`` that would fit nowhere counts minus its
demand). The candidate that maximises ``delta_r + sum_j p_j * best_j`` is placed. Other replicas
are FGD's. It runs FGD's protocol and prints the unallocated GPU % at arrived = 100 % per seed.

A default-trace replay takes about nine times FGD's time (42 s against 4.8 s), so it is a
measurement for docs/placement-policy.md ("Tried, kept or dropped"), registered here only, not an
engine profile.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from xpupool.cli import parse_seeds
from xpupool.engine import registry
from xpupool.engine.context import Context
from xpupool.engine.profile import BUILTIN_PROFILES, make_profile
from xpupool.engine.scorers.base import ScorerEnv
from xpupool.engine.scorers.fgd import Fgd
from xpupool.engine.state import BoolArray, FloatArray, IntArray
from xpupool.model.allocation import Allocation, DeviceShare
from xpupool.model.request import Request
from xpupool.sim.runner import RunSpec, run_one

TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces" / "alibaba-gpu-v2023"
TENTATIVE = -1  # allocation id of the tentative placement (the engine's ids start at 1)
NAME = "fgd-lookahead"


class FgdLookahead(Fgd):
    name = NAME
    candidates = 6
    shapes = 8
    slack = 1

    def __init__(self, env: ScorerEnv) -> None:
        super().__init__(env)
        self.pipeline = env.pipeline
        weights = np.asarray(self.frag.workload.weights)
        top = np.argsort(-weights, kind="stable")[: self.shapes]
        total = float(weights[top].sum())
        self.next: list[tuple[Request, float]] = [
            (self.frag.workload.shapes[i], float(weights[i]) / total) for i in top.tolist()
        ]

    def score(self, ctx: Context) -> FloatArray:
        scores = super().score(ctx)
        fitting = np.flatnonzero(ctx.node_fit)
        if ctx.k != 1 or fitting.size < 2 or self._columns is None:
            return scores
        state = ctx.state
        top = scores[fitting].max()
        pool = fitting[scores[fitting] >= top - self.slack]
        pool = pool[np.lexsort((state.rank[pool], -scores[pool]))][: self.candidates]
        if pool.size < 2:
            return scores
        before, cached, _, _ = self._fragmentation(ctx)
        columns = self._columns[1]
        nexts = [self._next_shape(req, p) for req, p in self.next]
        best_value, best = -np.inf, (-1, -1)
        for node in pool.tolist():
            card = int(columns[node])
            value = float(before[node] - cached.frag_after[node, card])
            state.apply(_tentative(ctx, node, card))
            for ctx_j, p, per_node, ranked, eligible in nexts:
                others = [float(per_node[i]) for i in ranked.tolist() if i != node]
                here = self._delta_at(ctx_j, node, eligible)
                found = max([here, *others[:1]])
                value += p * (found if found > -np.inf else -float(ctx_j.k * ctx_j.need_core))
            state.revert(TENTATIVE)
            if value > best_value:
                best_value, best = value, (node, card)
        scores[best[0]] = top + 1.0
        columns[best[0]] = best[1]
        return scores

    def _next_shape(
        self, req: Request, p: float
    ) -> tuple[Context, float, FloatArray, IntArray, BoolArray]:
        """A next shape's context, probability, best delta per node now, the two nodes where it
        is best (a candidate changes only its own node), and eligible cards."""
        ctx = self.pipeline.context(req)
        self.pipeline.filter(ctx)
        before, cached, fitting, _ = self._fragmentation(ctx)
        per_node = np.full(ctx.state.n_nodes, -np.inf)
        if fitting.size and cached.frag_after.ndim == 1:
            per_node[fitting] = before[fitting] - cached.frag_after[fitting]
        elif fitting.size:
            assert ctx.dev_fit is not None
            delta = before[fitting, None] - cached.frag_after[fitting]
            per_node[fitting] = np.where(ctx.dev_fit[fitting], delta, -np.inf).max(axis=1)
        ranked = np.argsort(-per_node)[:2]
        return ctx, p, per_node, ranked, self.pipeline.eligible(ctx)

    def _delta_at(self, ctx: Context, node: int, eligible: BoolArray) -> float:
        """The best FGD delta of ``ctx``'s shape on ``node`` as the state is now, or -inf. Fit is
        checked here for the one node with the dynamic filters' tests (node CPU and memory, card
        compute and memory; the traces ask for no link groups) instead of re-filtering the fleet."""
        s, req = ctx.state, ctx.req
        if s.node_cpu_free[node] < req.cpu_milli or s.node_mem_free[node] < req.memory_mib:
            return -np.inf
        before = float(self.frag.current()[node])
        nodes = np.array([node])
        if ctx.k == 0:
            return before - float(self._evaluate(ctx, self.frag.table, nodes)[0])
        assert ctx.dev_fit is not None
        need = ctx.need_mib if isinstance(ctx.need_mib, int) else ctx.need_mib[node]
        row = eligible[node] & (s.dev_core_free[node] >= ctx.need_core)
        row &= s.dev_mem_free[node] >= need
        if int(row.sum()) < ctx.k:
            return -np.inf
        saved = ctx.dev_fit[node].copy()
        ctx.dev_fit[node] = row
        after = self._evaluate(ctx, self.frag.table, nodes)[0]
        ctx.dev_fit[node] = saved
        if ctx.k == 1:
            return before - float(np.where(row, after, np.inf).min())
        return before - float(after)


def _tentative(ctx: Context, node: int, card: int) -> Allocation:
    s = ctx.state
    slot = node * s.width + card
    need = ctx.need_mib if isinstance(ctx.need_mib, int) else int(ctx.need_mib[node, card])
    share = DeviceShare(s.slot_uuid[slot], slot, need, ctx.need_core)
    return Allocation(
        TENTATIVE,
        "lookahead",
        0,
        s.node_names[node],
        node,
        ctx.req.cpu_milli,
        ctx.req.memory_mib,
        (share,),
        0,
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--trace", default="default")
    parser.add_argument("--seeds", default="42-45", help="a range such as 42-51 or a list")
    parser.add_argument("--candidates", type=int, default=FgdLookahead.candidates)
    parser.add_argument("--shapes", type=int, default=FgdLookahead.shapes)
    parser.add_argument("--slack", type=int, default=FgdLookahead.slack)
    args = parser.parse_args()
    FgdLookahead.candidates, FgdLookahead.shapes, FgdLookahead.slack = (
        args.candidates,
        args.shapes,
        args.slack,
    )
    registry.SCORERS[NAME] = FgdLookahead
    BUILTIN_PROFILES[NAME] = make_profile(NAME, {NAME: 1}, "binpack")
    seeds = parse_seeds(args.seeds)
    results = []
    for seed in seeds:
        start = time.perf_counter()
        spec = RunSpec(
            str(TRACES / "openb_node_list_gpu_node.csv"),
            str(TRACES / f"openb_pod_list_{args.trace}.csv"),
            NAME,
            seed,
        )
        found = float(run_one(spec)["unallocated_pct_at_100"])  # type: ignore[arg-type]
        results.append(found)
        print(f"{args.trace} seed {seed}: {found:.2f} % ({time.perf_counter() - start:.1f} s)")
    print(f"{args.trace} mean over {len(results)} seeds: {np.mean(results):.3f} %")


if __name__ == "__main__":
    main()
