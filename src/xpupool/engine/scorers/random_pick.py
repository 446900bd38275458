"""Random: a uniform score per node from the engine's seeded generator (the FGD paper's baseline)."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from xpupool.engine.context import Context
from xpupool.engine.state import FloatArray


class RandomPick:
    name: ClassVar[str] = "random"

    def __init__(self, seed: int = 0) -> None:
        self._rng = np.random.default_rng(seed)

    def score(self, ctx: Context) -> FloatArray:
        result: FloatArray = self._rng.integers(0, 101, ctx.state.n_nodes).astype(np.float64)
        return result
