"""GpuPacking: share partly used devices first, then devices on partly used nodes, then empty nodes
(the FGD paper's baseline, ``gpu_packing_score.go``). CPU-only replicas score 0 everywhere.

- every device of the node idle:              max(33 - n_dev, n_dev)
- else take the k best-fit fitting devices; if j >= 1 of them are idle:  max(50 - j, 33)
- else (all partly used):  max(100 - sum(free * 100 // 1000) // 10, 50)
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from xpupool.engine.context import Context
from xpupool.engine.state import FloatArray
from xpupool.model.request import WHOLE


class GpuPacking:
    name: ClassVar[str] = "gpupacking"

    def score(self, ctx: Context) -> FloatArray:
        s = ctx.state
        n = s.n_nodes
        if ctx.k == 0 or ctx.dev_fit is None:
            return np.zeros(n, np.float64)
        free = np.where(ctx.dev_fit, s.dev_core_free, WHOLE + 1)
        chosen = np.sort(free, axis=1)[:, : ctx.k]  # best fit: least free first
        idle_chosen = (chosen == WHOLE).sum(axis=1)
        partial = np.maximum(100 - ((chosen * 100) // WHOLE).sum(axis=1) // 10, 50)
        some_idle = np.maximum(50 - idle_chosen, 33)
        n_dev = s.node_n_dev
        all_idle = np.maximum(33 - n_dev, n_dev)
        score = np.where(idle_chosen > 0, some_idle, partial)
        score = np.where(s.node_dev_core_free == s.node_dev_core_total, all_idle, score)
        result: FloatArray = score.astype(np.float64)
        return result
