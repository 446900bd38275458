"""Effective throughput: among the cards a job may use, prefer those where it gains most per unit
of scarce capacity.

A job that states its relative speed per card model (``Request.speeds``: declared, measured or
estimated, ``catalog/throughput.py``) is scored per node by its best fitting card:

    rel(m)  = speed(m) / max speed            how fast the job runs on model m, 0..1
    ref(m)  = mean rel(m) over the jobs placed what a card of m is worth to the workload
              (recent ones weigh more: a job's weight halves every WORTH_HALF_LIFE_JOBS)
    u       = share of the fleet's card compute in use, 0..1
    eff(m)  = rel(m) / ref(m) ** u

On an idle fleet (u = 0) the job goes to its fastest card. As cards run out, a card's worth to
everyone else weighs in: a job whose advantage on a card model is smaller than the typical job's
leaves those cards to the jobs that gain more (a recommendation model that runs as fast on a K80
takes the K80 when V100s are scarce). This is Gavel's idea (OSDI 2020: max-min fairness on
effective throughput, throughputs normalised per job) as one decision per job in the one cycle,
without rounds (moving running jobs onto faster cards as they free up is the cycle's option,
``engine/cycle/faster_cards.py``). A card model the job names no speed for counts as its slowest
named one. Scores are ``100 * eff / max eff`` over the fitting nodes; a request without speeds,
or whose fitting cards are all alike to it, is not scored (None).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from xpupool.engine.context import Context
from xpupool.engine.scorers.base import MAX_SCORE
from xpupool.engine.state import ClusterState, FloatArray
from xpupool.model.request import Request
from xpupool.model.speeds import Speeds

WORTH_HALF_LIFE_JOBS = 200
"""ref(m) forgets: a placed job weighs half as much 200 placed jobs later, so a workload that
changes (a new kind of job, a model gone) moves what each card is worth within a few hundred
placements, not never."""
WORTH_DECAY = 0.5 ** (1.0 / WORTH_HALF_LIFE_JOBS)


class Throughput:
    name: ClassVar[str] = "throughput"

    def __init__(self) -> None:
        # per (vendor, printed model): the decayed sum of rel over the placed jobs with speeds,
        # and their decayed count
        self._worth_sum: dict[tuple[str, str], float] = {}
        self._seen = 0.0
        self._rel_cache: dict[tuple[Speeds, int], FloatArray] = {}
        self._state: ClusterState | None = None  # the state last scored on (models, catalog)

    def observe(self, req: Request, placed: bool) -> None:
        """A placed request with speeds adds its relative speed per model the fleet has to
        ``ref``, after what was there decays by :data:`WORTH_DECAY`. A refused one adds nothing:
        a job that waits is tried again and again, and would count once per try."""
        state = self._state
        if not placed or not req.speeds or state is None:
            return
        rel = self._rel_of_models(req.speeds, state)
        for key in self._worth_sum:
            self._worth_sum[key] *= WORTH_DECAY
        for key, value in zip(state.models, rel.tolist(), strict=True):
            self._worth_sum[key] = self._worth_sum.get(key, 0.0) + value
        self._seen = self._seen * WORTH_DECAY + 1.0

    def score(self, ctx: Context) -> FloatArray | None:
        speeds = ctx.req.speeds
        if not speeds or ctx.dev_fit is None:
            return None
        state = ctx.state
        rel = self._rel_of_models(speeds, state)
        eff = rel / self._worth(state) ** self._in_use(state)
        card = np.where(
            ctx.dev_fit & (state.dev_model >= 0), eff[np.maximum(state.dev_model, 0)], 0.0
        )
        node = card.max(axis=1)
        candidates = ctx.candidates()
        if candidates.size == 0:
            return None
        best = float(node[candidates].max())
        if best <= 0.0 or float(node[candidates].min()) == best:
            return None
        result: FloatArray = MAX_SCORE * node / best
        return result

    def _rel_of_models(self, speeds: Speeds, state: ClusterState) -> FloatArray:
        """``[n_models]`` the job's speed per model id relative to its best, one model at a
        time matched as the request's model list is (catalog names, aliases, families)."""
        if state is not self._state:  # another state: its model ids differ
            self._rel_cache.clear()
            self._state = state
        key = (speeds, len(state.models))
        found = self._rel_cache.get(key)
        if found is not None:
            return found
        rel = relative_speeds(speeds, state)
        self._rel_cache[key] = rel
        return rel

    def _worth(self, state: ClusterState) -> FloatArray:
        """``[n_models]`` ref(m): the mean relative speed of the jobs seen on m (1.0 before any)."""
        if not self._seen:
            return np.ones(len(state.models), np.float64)
        return np.asarray(
            [max(self._worth_sum.get(key, self._seen) / self._seen, 1e-6) for key in state.models],
            np.float64,
        )

    @staticmethod
    def _in_use(state: ClusterState) -> float:
        """The share of the usable cards' compute that is committed now, 0..1."""
        usable = state.dev_usable
        total = float(state.dev_core_commit[usable].sum())
        if total <= 0.0:
            return 0.0
        return 1.0 - float(state.dev_core_free[usable].sum()) / total


def relative_speeds(speeds: Speeds, state: ClusterState) -> FloatArray:
    """``[n_models]`` a job's speed per model id of ``state`` relative to its best, one model at
    a time matched as the request's model list is (catalog names, aliases, families); a model it
    names no speed for counts as its slowest named one."""
    lowest = min(s for _, s in speeds)
    values = [
        next((s for m, s in speeds if state.catalog.matches(m, printed, vendor)), lowest)
        for vendor, printed in state.models
    ]
    arr = np.asarray(values, np.float64)
    rel: FloatArray = arr / arr.max() if arr.size else arr
    return rel
