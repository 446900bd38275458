"""``lookahead``: a declared post-score step. The scores are greedy: they rate what a placement does
to the node's fragmentation now. Among the best ``candidates`` nodes within ``look_slack`` points
(of the profile's weighted sum) of the best (the engine's seeded order among equals), each with
the cards the scores chose, it takes the one the lookahead (``engine/fragmentation/lookahead.py``)
values most: its FGD delta plus, for each of the ``shapes`` likeliest next device shapes, the
shape's weight times its best FGD delta anywhere in the fleet after this placement. It applies to
every replica (one card, several, or CPU only). The built-in profiles' weights keep the policy's
points, so ``look_slack`` is 1 point of the fragmentation delta.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from xpupool.engine.compiled import jit
from xpupool.engine.context import Context
from xpupool.engine.fragmentation.lookahead import CANDIDATES, SHAPES, Lookahead
from xpupool.engine.fragmentation.measure import IndexArray
from xpupool.engine.plugin_args import PluginArgs
from xpupool.engine.scorers.base import ScorerEnv
from xpupool.engine.state import BoolArray, ClusterState, FloatArray, IntArray

LOOK_SLACK = 1.0  # points of the weighted sum below the best within which it compares candidates


@dataclass(frozen=True, slots=True)
class LookaheadArgs(PluginArgs):
    """How many near-best nodes and next shapes it compares, and how near is near."""

    candidates: int = CANDIDATES
    shapes: int = SHAPES
    look_slack: float = LOOK_SLACK

    def __post_init__(self) -> None:
        for name, value in (("candidates", self.candidates), ("shapes", self.shapes)):
            if value < 1:
                raise ValueError(f"{name} must be at least 1, got {value}")
        if self.look_slack < 0:
            raise ValueError(f"look_slack must be >= 0, got {self.look_slack}")


class LookaheadStep:
    name: ClassVar[str] = "lookahead"
    default_args: ClassVar[LookaheadArgs] = LookaheadArgs()

    def __init__(self, env: ScorerEnv) -> None:
        if env.model is None:
            raise ValueError("the lookahead needs the engine's workload model")
        self.model = env.model()
        self.args = env.args if isinstance(env.args, LookaheadArgs) else self.default_args
        self._look = Lookahead(self.model.frag, self.args.shapes)
        self._warm()  # every node's next-shape deltas, once, before placing
        one = np.zeros(1, np.int64)
        _top(one, np.zeros(1), one, np.empty(1, np.int64))  # compiled now, not on a request
        self.model.parts.append(lambda: self._lookahead().describe())
        self.model.warmers.append(self._warm)

    def _warm(self) -> None:
        """Every node's next-shape deltas for the model's current measure, ahead of a placement."""
        look = self._lookahead()
        if look.active:
            self.model.frag.current()
            look.update(self.model.state)

    def _lookahead(self) -> Lookahead:
        """The lookahead over the model's current measure (a re-learned workload starts afresh)."""
        if self._look.frag is not self.model.frag:
            self._look = Lookahead(self.model.frag, self.args.shapes)
        return self._look

    def post_score(self, ctx: Context, candidates: IntArray, total: FloatArray) -> int | None:
        """Among the near-best by ``total``, each with the card the profile's card scorers chose
        (``ctx.cards``; the first fitting when none did) or the first ``k`` fitting cards, the node
        the lookahead prefers; None when fewer than two are near the best or they are alike (the
        engine's order then decides, as it would)."""
        look = self._lookahead()
        if candidates.size < 2 or not look.active:
            return None
        state = ctx.state
        seen = self.model.fragmentation(ctx)
        totals = total[candidates]
        near = totals >= float(totals.max()) - self.args.look_slack
        pool = candidates[near]
        if pool.size < 2:
            return None
        pool = _nearest(pool, totals[near], state.rank, self.args.candidates)
        taken = np.zeros((pool.size, state.width), np.bool_)
        frag_after = seen.after.frag_after
        if ctx.k == 1:
            assert ctx.dev_fit is not None
            columns = ctx.cards[pool] if ctx.cards is not None else ctx.dev_fit[pool].argmax(axis=1)
            taken[np.arange(pool.size), columns] = True
            gain = seen.before[pool] - frag_after[pool, columns]
        else:
            if ctx.k:
                assert ctx.dev_fit is not None
                fit = ctx.dev_fit[pool]
                taken = fit & (np.cumsum(fit, axis=1) <= ctx.k)
            gain = seen.before[pool] - frag_after[pool]
        if _twins(state, self.model.frag.table.node_kind, pool, taken):
            return None  # equal values: the lookahead would keep the first, as the engine does
        need = ctx.need_mib if isinstance(ctx.need_mib, int) else ctx.need_mib[pool]
        values = look.values(
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


def _nearest(pool: IndexArray, totals: FloatArray, rank: IntArray, size: int) -> IndexArray:
    """The first ``size`` of ``pool`` by total, highest first, then by ``rank``; as a stable
    lexsort of the whole pool would give them, in one compiled pass that keeps the best ``size``
    (a pool may hold most of the fleet; a NaN total takes the sort, which puts NaNs last)."""
    if np.isnan(totals).any():
        ordered: IndexArray = pool[np.lexsort((rank[pool], -totals))][:size]
        return ordered
    chosen = np.empty(min(size, pool.size), np.int64)
    _top(pool, totals, rank, chosen)
    return chosen


def _top_loop(pool: IndexArray, totals: FloatArray, rank: IntArray, chosen: IndexArray) -> None:
    """Into ``chosen`` the best ``chosen.size`` of ``pool`` in order: higher total first, then lower
    rank, then earlier in ``pool`` (no NaN in ``totals``). An insertion into the kept few: most of
    the pool loses to the last kept one and costs one comparison."""
    size = chosen.size
    keep = np.empty(size, np.int64)  # positions in pool, best first
    count = 0
    for i in range(pool.size):
        t, r = totals[i], rank[pool[i]]
        if count == size:
            last = keep[size - 1]
            if not (t > totals[last] or (t == totals[last] and r < rank[pool[last]])):
                continue
            j = size - 1
        else:
            j = count
            count += 1
        while j > 0:
            prev = keep[j - 1]
            if t > totals[prev] or (t == totals[prev] and r < rank[pool[prev]]):
                keep[j] = prev
                j -= 1
            else:
                break
        keep[j] = i
    for j in range(size):
        chosen[j] = pool[keep[j]]


_top = jit(_top_loop)


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
