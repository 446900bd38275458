"""Random: one fitting node drawn uniformly from the engine's seeded generator scores 100, the rest 0;
as a device picker, a one-device share goes to a uniformly drawn fitting device (the FGD paper's
Random-fit baseline, ``random_score.go`` and its reservoir-sampled GPU choice). Whole devices keep the
profile's device policy.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from xpupool.engine.context import Context
from xpupool.engine.state import FloatArray
from xpupool.model.request import WHOLE


class RandomPick:
    name: ClassVar[str] = "random"

    def __init__(self, seed: int = 0) -> None:
        self._rng = np.random.default_rng(seed)

    def score(self, ctx: Context) -> FloatArray:
        scores = np.zeros(ctx.state.n_nodes, np.float64)
        candidates = ctx.candidates()
        if candidates.size:
            scores[candidates[self._rng.integers(candidates.size)]] = 100.0
        return scores

    def pick(self, ctx: Context, node: int) -> list[int] | None:
        if ctx.k != 1 or ctx.need_core >= WHOLE or ctx.dev_fit is None:
            return None
        columns = np.flatnonzero(ctx.dev_fit[node])
        return [int(columns[self._rng.integers(columns.size)])]
