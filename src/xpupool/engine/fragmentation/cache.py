"""The fragmentation measure (``measure.py``) kept current per node: recomputed only for the nodes
whose version moved since it was last evaluated, with the per-shape quantities the scorers reuse.
"""

from __future__ import annotations

import numpy as np

from xpupool.engine.eligibility import Eligibility
from xpupool.engine.fragmentation.kernels import refresh
from xpupool.engine.fragmentation.measure import ShapeTable, TargetWorkload
from xpupool.engine.state import BoolArray, ClusterState, FloatArray, IntArray


class FragmentationCache:
    """Per-node fragmentation and per-node shape quantities (:class:`NodeView`), kept current by
    recomputing only nodes whose version moved. The view does not depend on any request, so the
    FGD scorer reads it from here instead of recomputing it for every candidate evaluation."""

    def __init__(
        self,
        state: ClusterState,
        pipeline: Eligibility,
        workload: TargetWorkload,
        capped: bool = False,
    ) -> None:
        self.state = state
        self.pipeline = pipeline
        self.workload = workload
        self.capped = capped
        self._reset()

    def _reset(self) -> None:
        s = self.state
        self.table = ShapeTable(s, self.pipeline, self.workload)
        m = self.table.weights.size
        n, w = s.dev_present.shape
        self.values = np.zeros(n, np.float64)
        self.version = np.full(n, -1, np.int64)
        self._idle = np.zeros(n, np.int64)
        self._usable = np.zeros((n, m, w), np.bool_)
        self._usable_idle = np.zeros((n, m), np.int64)
        self._usable_count = np.zeros((n, m), np.int64)
        self._seq = -1  # the state's change number when every node was last current (-1: never)

    def current(self) -> FloatArray:
        """``[N]`` fragmentation of every node now."""
        s = self.state
        if self.table.epoch != s.epoch or self.values.size != s.n_nodes:
            self._reset()
        nodes = s.changed_nodes(self._seq, self.table.epoch, self.version)  # all, after a reset
        if nodes.size:
            quantities = (self._idle, self._usable, self._usable_idle, self._usable_count)
            refresh(nodes, self.table.arrays, s, self.capped, quantities, self.values, self.version)
        self._seq = s.change_seq
        return self.values

    def cached(self) -> tuple[BoolArray, IntArray, IntArray, IntArray]:
        """The whole fleet's ``usable`` [N, M, W], ``U``, ``cnt`` [N, M] and ``T`` [N], as of the
        last :meth:`current`: the compiled loops gather the rows they need themselves."""
        return self._usable, self._usable_idle, self._usable_count, self._idle
