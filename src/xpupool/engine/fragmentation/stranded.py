"""Stranded capacity: idle device memory and compute that no shape of the target workload can use.

FGD's fragment (``measure.py``) is an expectation over the workload's shapes: how much idle compute
a task drawn from it could not use. Stranded capacity is the plainer figure a capacity planner and
an operator read: the idle memory (MiB) and compute (thousandths of a device) of the cards that no
shape of the workload could take a share of on their node right now. A card's idle capacity is
stranded when, for every shape, either the shape does not fit on the card's node at all (too few
usable cards, not enough CPU or memory, a CPU-only shape) or the card has no room for one of its
shares (``capacity.share_fits``: memory, compute, a task slot). Cards out of service (unhealthy,
cordoned, on a cordoned or removed node) are not counted: they are not idle capacity.

The simulator's reports, the benchmarks, the dashboard and the metrics of the server and of the
Kubernetes extender all call :func:`stranded_capacity`, so they report one figure.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from xpupool.engine.fragmentation.measure import IndexArray, ShapeTable, node_view, shape_fits
from xpupool.engine.state import ClusterState, IntArray


@dataclass(frozen=True, slots=True)
class Stranded:
    """Per selected node: stranded idle device memory (MiB) and compute (thousandths), and how
    many of its cards hold some (an in-service card with idle memory or compute that no shape
    wants; a full card strands nothing)."""

    memory_mib: IntArray
    core_milli: IntArray
    devices: IntArray

    @property
    def total_memory_mib(self) -> int:
        return int(self.memory_mib.sum())

    @property
    def total_core_milli(self) -> int:
        return int(self.core_milli.sum())


def stranded_capacity(
    state: ClusterState, table: ShapeTable, nodes: IndexArray | None = None
) -> Stranded:
    """Stranded idle device memory and compute of ``nodes`` (all nodes when None) for the target
    workload of ``table`` (a :class:`ShapeTable` of the state's current epoch), now. Plain NumPy
    over ``[S, M, W]`` (nodes x shapes x cards): meant for reports, not for every placement."""
    picked: IndexArray = np.arange(state.n_nodes) if nodes is None else nodes
    view = node_view(state, table, picked)
    fits = shape_fits(
        table, view.usable_count, state.node_cpu_free[picked], state.node_mem_free[picked]
    )
    wanted = (view.usable & fits[:, :, None]).any(axis=1)  # [S, W] some fitting shape could use it
    in_service = state.dev_usable[picked] & state.node_ok[picked][:, None]
    stranded = in_service & ~wanted
    memory: IntArray = (state.dev_mem_free[picked] * stranded).sum(axis=1)
    cores: IntArray = (state.dev_core_free[picked] * stranded).sum(axis=1)
    idle = (state.dev_mem_free[picked] > 0) | (state.dev_core_free[picked] > 0)
    devices: IntArray = (stranded & idle).sum(axis=1)
    return Stranded(memory, cores, devices)
