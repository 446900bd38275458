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

with ``F`` FGD's expected fragmentation (``engine/fragmentation.py``), ``q_j`` the shapes' weights
renormalised over the ``SHAPES`` kept, and ``k_j * core_j`` the compute the shape asks. The candidate
with the largest value wins. A shape lands on each card with room for its compute and its memory
share (on the first ``k`` such cards when it asks several, as FGD places them), on a schedulable
node with its CPU and memory free: the amounts the dynamic filters test.

When the ``SHAPES`` likeliest shapes are under ``MIN_COVER`` of the device tasks, most of what comes
next is something the lookahead does not weigh, and it is off (:attr:`Lookahead.active`).

Cost: ``B_j`` per node is kept and recomputed only for nodes whose version moved (one or two per
placement), together with the candidates, and every hypothetical node of a call (a base node with
``j`` placed each way it can land) is evaluated in one batch per kind of node, over the shapes that
kind serves; a one-card hypothesis updates its base's per-shape quantities at one card.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from xpupool.engine.fragmentation import (
    FragmentationCache,
    IndexArray,
    ServedShapes,
    ShapeTable,
    cpu_capped,
    settled,
)
from xpupool.engine.state import BoolArray, ClusterState, FloatArray, IntArray

CANDIDATES = 6  # near-best placements compared
SHAPES = 8  # likeliest next device shapes looked at
CHUNK = 256  # base nodes per batch when many nodes changed (bounds the arrays' size)
MIN_COVER = 0.5  # least share of the device tasks the next shapes must be for a lookahead


class Lookahead:
    """Per-node best deltas of the next shapes (kept current) and the lookahead choice."""

    def __init__(self, frag: FragmentationCache, shapes: int = SHAPES) -> None:
        self.frag = frag
        self.shapes = shapes
        self._table: ShapeTable | None = None

    @property
    def active(self) -> bool:
        """Do the next shapes make up at least ``MIN_COVER`` of the device tasks? Below, most of
        what comes next is something the lookahead does not weigh: it is skipped (measured gains
        there are within the seeds' noise, and its cost is not: docs/placement-policy.md)."""
        self._refresh_rows()
        return self.cover >= MIN_COVER

    def describe(self) -> str:
        """The next shapes looked at, for reports: how many and how much of the device tasks."""
        self._refresh_rows()
        shapes = "shape" if self.rows.size == 1 else "shapes"
        looked = f"{self.rows.size} next {shapes} ({100 * self.cover:.0f} % of device tasks)"
        if self.active:
            return f"lookahead over {looked}"
        return f"no lookahead: its {looked} are under {100 * MIN_COVER:.0f} %"

    # ------------------------------------------------------------------ choosing
    def values(
        self,
        state: ClusterState,
        pool: IndexArray,
        core: IntArray,
        mem: IntArray,
        gain: FloatArray,
        cpu: int,
        memory: int,
    ) -> FloatArray:
        """``[C]`` lookahead value of each candidate: ``pool`` nodes, the compute ``core`` and MiB
        ``mem`` the replica takes from each of their cards (``[C, W]``), its CPU and memory, and
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
        cpu_free = state.node_cpu_free[bases]
        mem_free = state.node_mem_free[bases]
        cpu_free[stale.size :] -= cpu
        mem_free[stale.size :] -= memory
        deltas = self._best_deltas(
            bases, core_free, mem_free_dev, cpu_free, mem_free, state.node_ok[bases]
        )
        self._keep(state, stale, deltas[: stale.size])
        found = np.maximum(deltas[stale.size :], self._best_elsewhere(pool))
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
        """Take the next shapes from the current table; bring ``B_j`` up to date in batches when
        many nodes changed, and return those that changed when few did (the caller evaluates
        them with its candidates)."""
        self._refresh_rows()
        stale = np.flatnonzero(self.version != state.node_version)
        if stale.size <= CHUNK:
            return stale
        for start in range(0, stale.size, CHUNK):
            nodes = stale[start : start + CHUNK]
            self._keep(state, nodes, self._deltas_now(state, nodes))
        return stale[:0]

    def _deltas_now(self, state: ClusterState, nodes: IndexArray) -> FloatArray:
        return self._best_deltas(
            nodes,
            state.dev_core_free[nodes],
            state.dev_mem_free[nodes],
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

    def _keep(self, state: ClusterState, nodes: IndexArray, deltas: FloatArray) -> None:
        self.best[:, nodes] = deltas.T
        self.version[nodes] = state.node_version[nodes]

    def _best_elsewhere(self, pool: IndexArray) -> FloatArray:
        """``[C, J]``: each next shape's best delta over the nodes other than each candidate's."""
        shapes = np.arange(self.rows.size)
        best_node = np.argmax(self.best, axis=1)
        best_value = self.best[shapes, best_node]
        self.best[shapes, best_node] = -np.inf
        runner_up = self.best.max(axis=1)
        self.best[shapes, best_node] = best_value
        result: FloatArray = np.where(
            pool[:, None] == best_node[None, :], runner_up[None, :], best_value[None]
        )
        return result

    def _best_deltas(
        self,
        nodes: IndexArray,
        core: IntArray,
        mem: IntArray,
        cpu: IntArray,
        nmem: IntArray,
        ok: BoolArray,
    ) -> FloatArray:
        """``[B, J]``: each next shape's best delta on base nodes ``nodes`` whose free device
        compute ``core``, device memory ``mem`` (``[B, W]``), CPU ``cpu`` and memory ``nmem`` are
        given; -inf where it does not fit.

        Hypotheses: a shape of several cards lands on the first ``k`` cards with room, and is
        evaluated afresh with the bases; a one-card shape on card ``c`` changes only that card, so
        its hypotheses are the base's per-shape quantities updated at ``c`` (``[H, M]``, no card
        axis). Nodes are evaluated by kind, each over the shapes its kind serves."""
        table, capped = self.frag.table, self.frag.capped
        b = nodes.size
        rows = self.rows
        need_core = table.need_core[rows]
        count = table.count[rows]
        need = table.need_mib[nodes[:, None], rows[None, :]]  # [B, J, W]
        usable = (core[:, None, :] >= need_core[None, :, None]) & (mem[:, None, :] >= need)
        lands = (
            ok[:, None]
            & (cpu[:, None] >= table.cpu[rows][None])
            & (nmem[:, None] >= table.memory[rows][None])
            & (usable.sum(axis=2) >= count[None])
        )
        one = count == 1
        mb, mj = np.nonzero(lands & ~one[None])  # (base, shape) of several cards
        fit = usable[mb, mj]
        taken = fit & (np.cumsum(fit, axis=1) <= count[mj][:, None])
        fresh_nodes = np.concatenate([nodes, nodes[mb]])
        fresh_core = np.concatenate([core, core[mb] - taken * need_core[mj][:, None]])
        fresh_mem = np.concatenate([mem, mem[mb] - np.where(taken, need[mb, mj], 0)])
        fresh_cpu = np.concatenate([cpu, cpu[mb] - table.cpu[rows][mj]])
        fresh_nmem = np.concatenate([nmem, nmem[mb] - table.memory[rows][mj]])
        sb, sj, sc = np.nonzero(usable & (lands & one[None])[:, :, None])  # (base, shape, card)
        single_cpu = cpu[sb] - table.cpu[rows][sj]
        single_nmem = nmem[sb] - table.memory[rows][sj]
        single_core, single_mem = need_core[sj], need[sb, sj, sc]

        fresh = np.empty(fresh_nodes.size, np.float64)
        single = np.empty(sb.size, np.float64)
        kind_of = table.node_kind[fresh_nodes]
        kinds = np.unique(kind_of[:b]).tolist()
        for kind in kinds:
            served = table.kinds[kind]
            if len(kinds) == 1:
                at, si, of = np.arange(fresh_nodes.size), np.arange(sb.size), sb
            else:
                at = np.flatnonzero(kind_of == kind)  # the bases come first: ``of`` below
                si = np.flatnonzero(kind_of[sb] == kind)
                of = np.searchsorted(at, sb[si]).astype(np.intp)
            quantities = _Quantities.of(
                table, served, fresh_nodes[at], fresh_core[at], fresh_mem[at]
            )
            fresh[at] = quantities.counts.fragment(
                table, served, capped, fresh_cpu[at], fresh_nmem[at]
            )
            single[si] = quantities.with_card_taken(
                served, of, sc[si], single_core[si], single_mem[si]
            ).fragment(table, served, capped, single_cpu[si], single_nmem[si])
        before = fresh[:b]
        per_card = np.full((b, rows.size, core.shape[1]), -np.inf)
        per_card[sb, sj, sc] = before[sb] - single
        out: FloatArray = per_card.max(axis=2)
        out[mb, mj] = before[mb] - fresh[b:]
        return out


@dataclass(frozen=True, slots=True)
class _Counts:
    """FGD's per-shape quantities of (hypothetical) nodes, for the shapes one kind of node serves:
    idle compute ``[H]``, and the idle compute on usable cards and their number ``[H, M]``
    (``fragmentation.NodeView`` for states that are not the cluster's)."""

    idle: IntArray
    usable_idle: IntArray
    usable_count: IntArray

    def fragment(
        self, table: ShapeTable, columns: ServedShapes, capped: bool, cpu: IntArray, nmem: IntArray
    ) -> FloatArray:
        """``[H]`` expected fragmentation (settled) with free CPU ``cpu`` and memory ``nmem``: the
        formula of ``fragmentation.fragmentation`` over ``columns``, plus all idle compute for
        the shapes the kind does not serve."""
        fits = (
            (self.usable_count >= columns.count[None])
            & (cpu[:, None] >= columns.cpu[None])
            & (nmem[:, None] >= columns.memory[None])
            & columns.device_shape[None]
        )
        used: IntArray | FloatArray = self.usable_idle
        if capped:
            used = cpu_capped(table, self.usable_idle, cpu, nmem, columns.shapes)
        frag = (self.idle[:, None] - fits * used) @ columns.weights + columns.rest * self.idle
        result: FloatArray = settled(frag)
        return result


@dataclass(frozen=True, slots=True)
class _Quantities:
    """:class:`_Counts` of nodes evaluated afresh, with what they were computed from: free compute
    and memory per card ``[H, W]``, usable cards and each shape's need per card ``[H, M, W]``
    (``NEVER``: may not use it), so that one-card hypotheses can be derived from them."""

    counts: _Counts
    core: IntArray
    mem: IntArray
    usable: BoolArray
    need: IntArray

    @staticmethod
    def of(
        table: ShapeTable, columns: ServedShapes, nodes: IndexArray, core: IntArray, mem: IntArray
    ) -> _Quantities:
        need = table.need_mib[nodes[:, None], columns.column]
        usable = (core[:, None, :] >= columns.need_core[None, :, None]) & (mem[:, None, :] >= need)
        counts = _Counts(
            core.sum(axis=1),
            np.einsum("hw,hmw->hm", core, usable),
            np.count_nonzero(usable, axis=2),
        )
        return _Quantities(counts, core, mem, usable, need)

    def with_card_taken(
        self,
        columns: ServedShapes,
        of: IndexArray,
        card: IndexArray,
        core: IntArray,
        mem: IntArray,
    ) -> _Counts:
        """For each ``h``: row ``of[h]`` with ``core[h]`` compute and ``mem[h]`` MiB taken from
        card ``card[h]``; only that card's terms change."""
        was = self.usable[of, :, card]  # [H, M]
        core_left = self.core[of, card] - core
        mem_left = self.mem[of, card] - mem
        now = (core_left[:, None] >= columns.need_core[None]) & (
            mem_left[:, None] >= self.need[of, :, card]
        )
        base = self.counts
        return _Counts(
            base.idle[of] - core,
            base.usable_idle[of] - self.core[of, card][:, None] * was + core_left[:, None] * now,
            base.usable_count[of] - was + now,
        )
