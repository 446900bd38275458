"""GpuClustering (Gandiva-like): keep replicas of the same kind together (the FGD paper's baseline,
``gpu_clustering_score.go``). A replica's kind is ``share`` (one device, a fraction) or ``<k>-gpu``.

score = base + 25 * (dev_max - idle) // dev_max, with base 75 when the node hosts only this kind,
50 when it hosts this kind and others, 25 when it hosts no device replicas, 0 when only other kinds.
CPU-only replicas score 0 everywhere. Kind counts per node are kept from the state's per-node
allocations and refreshed only for nodes whose version moved.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from xpupool.engine.context import Context
from xpupool.engine.scorers.paper_common import max_device_milli
from xpupool.engine.state import ClusterState, FloatArray, IntArray
from xpupool.model.allocation import Allocation
from xpupool.model.request import WHOLE


def replica_kind(devices: int, core_permille: int) -> str | None:
    if devices == 0:
        return None
    return "share" if devices == 1 and core_permille < WHOLE else f"{devices}-gpu"


def _kind_of(alloc: Allocation) -> str | None:
    core = alloc.devices[0].core_permille if alloc.devices else 0
    return replica_kind(len(alloc.devices), core)


class GpuClustering:
    name: ClassVar[str] = "gpuclustering"

    def __init__(self) -> None:
        self._kinds: dict[str, int] = {}
        self._counts = np.zeros((0, 0), np.int64)
        self._version = np.zeros(0, np.int64)

    def score(self, ctx: Context) -> FloatArray:
        s = ctx.state
        kind = replica_kind(ctx.k, ctx.need_core)
        if kind is None:
            return np.zeros(s.n_nodes, np.float64)
        counts = self._refresh(s, kind)
        mine = counts[:, self._kinds[kind]] > 0
        any_kind = counts.sum(axis=1) > 0
        others = (counts > 0).sum(axis=1) - mine
        base = np.where(mine, np.where(others == 0, 75, 50), np.where(any_kind, 0, 25))
        dev_max = int(max_device_milli(s))
        pack = (25 * (dev_max - s.node_dev_core_free)) // dev_max
        result: FloatArray = (base + pack).astype(np.float64)
        return result

    def _refresh(self, s: ClusterState, kind: str) -> IntArray:
        """Kind counts ``[N, kinds]``, recounted only on nodes whose version moved."""
        if self._version.size != s.n_nodes:
            self._version = np.full(s.n_nodes, -1, np.int64)
        stale = np.flatnonzero(self._version != s.node_version)
        recount: dict[int, list[str]] = {}
        for node in stale.tolist():
            found = (_kind_of(a) for a in s.node_allocations[node].values())
            recount[node] = [k for k in found if k is not None]
        for name in (kind, *(k for kinds in recount.values() for k in kinds)):
            self._kinds.setdefault(name, len(self._kinds))
        shape = (s.n_nodes, len(self._kinds))
        if self._counts.shape != shape:
            grown = np.zeros(shape, np.int64)
            old = self._counts[: shape[0]]
            grown[: old.shape[0], : old.shape[1]] = old
            self._counts = grown
        for node, kinds in recount.items():
            self._counts[node] = 0
            for k in kinds:
                self._counts[node, self._kinds[k]] += 1
            self._version[node] = s.node_version[node]
        return self._counts
