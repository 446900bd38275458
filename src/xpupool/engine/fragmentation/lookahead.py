"""One-step lookahead: among near-best placements of a replica, take the one after which the
likeliest next shapes still land best.

Why: FGD's score (and xpupool's) is greedy: it rates a placement by what it does to the node's
expected fragmentation now. Placements it rates (nearly) equal can leave very different places for
the next task: one uses the last card on which the commonest shape fitted without fragmenting,
another does not. Looking one task ahead tells them apart.

For each candidate ``n`` (the scorer passes its best ``CANDIDATES`` nodes, each with what the
replica ``r`` would take there: a card, the first ``k`` cards that fit, or only CPU and memory) and
each of the ``SHAPES`` likeliest device shapes ``j`` of the target workload (rows of the shape
table, so shapes that behave alike are one):

    here_j(n)   = max over ways j lands on n after r of  F(n | r) - F(n | r, j)
    there_j(n)  = max over nodes n' != n of  B_j(n'),   B_j = j's best delta on a node now
    value(n)    = F(n) - F(n | r) + sum_j q_j * max(here_j, there_j)
                  (max(here_j, there_j) = -k_j * core_j when j then fits nowhere)

with ``F`` FGD's expected fragmentation (``measure.py``), ``q_j`` the shapes' weights
renormalised over the ``SHAPES`` kept, and ``k_j * core_j`` the compute the shape asks. The candidate
with the largest value wins. A shape lands on each card with room for its compute and its memory
share (on the first ``k`` such cards when it asks several, as FGD places them), on a schedulable
node with its CPU and memory free: the amounts the dynamic filters test.

Cost: ``B_j`` per node is kept and recomputed only for nodes whose version moved (one or two per
placement), together with the candidates, in one compiled loop (``kernels.py``) over every
hypothetical node of the call (a base node with ``j`` placed each way it can land), each over the
shapes its kind serves; a one-card hypothesis updates its base's per-shape quantities at one card.
"""

from __future__ import annotations

import numpy as np

from xpupool.engine.fragmentation.cache import FragmentationCache
from xpupool.engine.fragmentation.kernels import best_deltas, merge_top
from xpupool.engine.fragmentation.measure import IndexArray, ShapeTable
from xpupool.engine.state import BoolArray, ClusterState, FloatArray, IntArray

CANDIDATES = 6  # near-best placements compared
SHAPES = 8  # likeliest next device shapes looked at


class Lookahead:
    """Per-node best deltas of the next shapes (kept current) and the lookahead choice."""

    def __init__(self, frag: FragmentationCache, shapes: int = SHAPES) -> None:
        self.frag = frag
        self.shapes = shapes
        self._table: ShapeTable | None = None

    @property
    def active(self) -> bool:
        """Is there a next shape to look at (a target workload with device shapes)?"""
        self._refresh_rows()
        return self.rows.size > 0

    def describe(self) -> str:
        """The next shapes looked at, for reports: how many and how much of the device tasks."""
        self._refresh_rows()
        shapes = "shape" if self.rows.size == 1 else "shapes"
        if not self.active:
            return "no lookahead: no device shapes in the target workload"
        cover = f"{100 * self.cover:.0f} % of device tasks"
        return f"lookahead over {self.rows.size} next {shapes} ({cover})"

    # ------------------------------------------------------------------ choosing
    def values(
        self,
        state: ClusterState,
        pool: IndexArray,
        core: IntArray,
        mem: IntArray,
        taken: BoolArray,
        gain: FloatArray,
        cpu: int,
        memory: int,
    ) -> FloatArray:
        """``[C]`` lookahead value of each candidate: ``pool`` nodes, the compute ``core`` and MiB
        ``mem`` the replica takes from each of their cards ``taken`` (``[C, W]``), its CPU and memory, and
        ``gain``, FGD's delta of the replica there. The scorer takes the first of the largest."""
        stale = self._refresh(state)
        if self.rows.size == 0:
            return gain.astype(np.float64)
        # The candidates after the replica, and the nodes that changed, in one batch.
        bases = np.concatenate([stale, pool])
        core_free = state.dev_core_free[bases]
        mem_free_dev = state.dev_mem_free[bases]
        core_free[stale.size :] -= core
        mem_free_dev[stale.size :] -= mem
        tasks_free = state.dev_task_free[bases]
        tasks_free[stale.size :] -= taken
        cpu_free = state.node_cpu_free[bases]
        mem_free = state.node_mem_free[bases]
        cpu_free[stale.size :] -= cpu
        mem_free[stale.size :] -= memory
        deltas = self._best_deltas(
            bases, core_free, mem_free_dev, tasks_free, cpu_free, mem_free, state.node_ok[bases]
        )
        self._keep(state, stale, deltas[: stale.size])
        found = np.maximum(deltas[stale.size :], self.best_elsewhere(pool))
        found = np.where(np.isfinite(found), found, -self.demand[None, :])
        result: FloatArray = gain + found @ self.q
        return result

    def update(self, state: ClusterState) -> FloatArray:
        """``[J, N]`` each next shape's best delta on each node now (``B_j``), brought up to date."""
        stale = self._refresh(state)
        if stale.size:
            self._keep(state, stale, self._deltas_now(state, stale))
        return self.best

    # ------------------------------------------------------------------ internals
    def _refresh(self, state: ClusterState) -> IndexArray:
        """Take the next shapes from the current table; return the nodes that changed since their
        ``B_j`` was kept (the caller evaluates them with its candidates, in one call): from the
        state's log of changes, so that a placement costs what changed, not the fleet's size."""
        self._refresh_rows()
        changed = state.changed_nodes(self.seq, self.epoch, self.version)
        if changed.size > 1:
            changed = np.unique(changed)  # the log repeats a node changed twice
        return changed

    def _deltas_now(self, state: ClusterState, nodes: IndexArray) -> FloatArray:
        return self._best_deltas(
            nodes,
            state.dev_core_free[nodes],
            state.dev_mem_free[nodes],
            state.dev_task_free[nodes],
            state.node_cpu_free[nodes],
            state.node_mem_free[nodes],
            state.node_ok[nodes],
        )

    def _refresh_rows(self) -> None:
        """The next shapes: the ``shapes`` likeliest device rows of the current shape table (a new
        table, after the fleet changed or the workload was re-learned, starts ``B_j`` afresh)."""
        table = self.frag.table
        if table is self._table:
            return
        self._table = table
        n = table.need_mib.shape[0]
        rows = np.flatnonzero(~table.cpu_only)
        rows = rows[np.argsort(-table.weights[rows], kind="stable")][: self.shapes]
        self.rows: IndexArray = rows
        self.q: FloatArray = table.weights[rows] / max(float(table.weights[rows].sum()), 1e-300)
        self.demand: FloatArray = (table.count[rows] * table.need_core[rows]).astype(np.float64)
        device = float(table.weights[~table.cpu_only].sum())
        self.cover = float(table.weights[rows].sum()) / device if device > 0 else 0.0
        self.best: FloatArray = np.full((rows.size, n), -np.inf)  # B_j, shape-major
        self.version: IntArray = np.full(n, -1, np.int64)
        self.seq, self.epoch = 0, -1  # as of no change: every node is read by its version
        # Per shape, its best B_j and the node that has it, and the best of the other nodes
        # (with that node: a shape's value elsewhere than a candidate is one of the two).
        # Kept as B_j changes; a shape whose best or runner-up node changed is recomputed.
        j = rows.size
        self.top_value: FloatArray = np.full(j, -np.inf)
        self.top_node: IntArray = np.full(j, -1, np.int64)
        self.second_value: FloatArray = np.full(j, -np.inf)
        self.second_node: IntArray = np.full(j, -1, np.int64)
        self.dirty: BoolArray = np.ones(j, np.bool_)

    def _keep(self, state: ClusterState, nodes: IndexArray, deltas: FloatArray) -> None:
        """``deltas`` ``[B, J]`` are the best deltas on ``nodes`` (distinct) now."""
        self.best[:, nodes] = deltas.T
        self.version[nodes] = state.node_version[nodes]
        self.seq, self.epoch = state.change_seq, state.epoch
        if nodes.size:
            merge_top(
                nodes,
                deltas,
                self.top_value,
                self.top_node,
                self.second_value,
                self.second_node,
                self.dirty,
            )

    def best_elsewhere(self, pool: IndexArray) -> FloatArray:
        """``[C, J]``: each next shape's best delta over the nodes other than each candidate's:
        the shape's best, or its runner-up where the candidate has the best (equal bests: the
        same value whichever holds it)."""
        if self.dirty.any():
            self._recompute_top(np.flatnonzero(self.dirty))
        result: FloatArray = np.where(
            pool[:, None] == self.top_node[None, :],
            self.second_value[None, :],
            self.top_value[None, :],
        )
        return result

    def _recompute_top(self, shapes: IndexArray) -> None:
        """The best and runner-up of ``shapes`` over every node (the first of equal values, a NaN
        above every number, as ``np.argmax`` and ``np.max`` take them)."""
        part = self.best[shapes]
        at = np.arange(shapes.size)
        top = np.argmax(part, axis=1)
        self.top_node[shapes] = top
        self.top_value[shapes] = part[at, top]
        part[at, top] = -np.inf
        second = np.argmax(part, axis=1)
        self.second_node[shapes] = second
        self.second_value[shapes] = part[at, second]
        self.dirty[shapes] = False

    def _best_deltas(
        self,
        nodes: IndexArray,
        core: IntArray,
        mem: IntArray,
        tasks: IntArray,
        cpu: IntArray,
        nmem: IntArray,
        ok: BoolArray,
    ) -> FloatArray:
        """``[B, J]``: each next shape's best delta on base nodes ``nodes`` whose free device
        compute ``core``, device memory ``mem``, task slots ``tasks`` (``[B, W]``), CPU ``cpu`` and
        memory ``nmem`` are given; -inf where it does not fit. A shape of several cards lands on
        the first ``k`` cards with room; a one-card shape on each card with room, where only that
        card's terms change (``kernels.best_deltas``, over the shapes each node's kind serves)."""
        free = (core, mem, tasks, cpu, nmem, ok)
        return best_deltas(nodes, free, self.rows, self.frag.table.arrays, self.frag.capped)
