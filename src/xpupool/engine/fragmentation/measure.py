"""GPU fragmentation against a target workload (FGD, Weng et al., USENIX ATC'23, section 4).

A node's fragment for one task shape is the idle device compute that a task of that shape could not
use there: all of it when the shape cannot land on the node at all (CPU-only shape, wrong model, not
enough CPU, memory or devices), otherwise the idle compute on devices too full for one of its shares.
The node's fragmentation is the expectation over the target workload's shapes. Idle compute is counted
in thousandths of a device (``dev_core_free``), so one idle GPU contributes 1000.

Per shape m and node n, with ``usable`` = devices eligible for m with room for one of its shares
(``capacity.share_fits``):
    T(n)    = idle compute of n
    U_m(n)  = idle compute on usable devices,     cnt_m(n) = number of usable devices
    frag_m  = T - U_m  if m fits on n (cnt_m >= k_m, CPU and memory fit, m needs devices), else T
    F(n)    = sum_m p_m * frag_m(n)
Everything is computed for many nodes at once on ``[S, M, W]`` arrays (nodes x shapes x devices).
Arrays are node-major because every evaluation gathers a few nodes (those that changed): a node's
rows are then one contiguous block, several times faster to gather than one slice per shape.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from xpupool.engine.capacity import share_fits
from xpupool.engine.eligibility import Eligibility
from xpupool.engine.fragmentation.kernels import ShapeArrays
from xpupool.engine.fragmentation.row_kinds import unique_rows
from xpupool.engine.state import BoolArray, ClusterState, FloatArray, IntArray
from xpupool.model.request import Request

IndexArray = npt.NDArray[np.intp]

SETTLE = 6  # decimals kept of a fragment (thousandths of a device): see ``settled``
NEVER = np.iinfo(np.int64).max  # device memory "needed" on a device a shape may not use


@dataclass(frozen=True, slots=True)
class TargetWorkload:
    """Typical replica shapes and their probabilities (summing to 1)."""

    shapes: tuple[Request, ...]
    weights: tuple[float, ...]

    @classmethod
    def from_requests(cls, requests: Iterable[Request], coverage: float = 0.95) -> TargetWorkload:
        """The most popular shapes, by count, that together cover ``coverage`` of the requests,
        renormalised (FGD's "target workload"). Memory is not part of a shape, as in the paper."""
        counts = ShapeCounts()
        for req in requests:
            counts.add(req)
        return counts.workload(coverage)


ShapeKey = tuple[object, ...]


def shape_key(req: Request) -> ShapeKey:
    """What makes two requests one shape of a target workload."""
    d = req.devices
    return (
        req.cpu_milli,
        d.count,
        d.need_core_permille,
        d.memory_mib,
        d.memory_permille,
        d.selector_key(),
    )


class ShapeCounts:
    """Requests counted per shape, kept as requests come and go (an online learner's window): the
    target workload of the requests counted is then :meth:`workload`, without going over them
    again. Each shape is represented by its first request still counted when it was added."""

    def __init__(self) -> None:
        self.counts: Counter[ShapeKey] = Counter()
        self.first: dict[ShapeKey, Request] = {}

    def add(self, req: Request) -> None:
        key = shape_key(req)
        if key not in self.first:
            self.first[key] = Request(req.name, req.cpu_milli, 0, req.devices)
        self.counts[key] += 1

    def remove(self, req: Request) -> None:
        """Uncount one request counted before."""
        key = shape_key(req)
        left = self.counts[key] - 1
        if left > 0:
            self.counts[key] = left
        else:
            del self.counts[key], self.first[key]

    def workload(self, coverage: float = 0.95) -> TargetWorkload:
        """:meth:`TargetWorkload.from_requests` of the requests counted."""
        counts, first = self.counts, self.first
        total = sum(counts.values())
        if total == 0:
            return TargetWorkload((), ())

        # Most popular first; equal counts by (cpu, share, count, models) descending, as the
        # paper's simulator sorts them, so the 95 % cut is the same.
        def rank(k: ShapeKey) -> tuple[int, tuple[object, ...]]:
            r = first[k]
            d = r.devices
            return (counts[k], (r.cpu_milli, d.need_core_permille, d.count, "|".join(d.models)))

        order = sorted(counts, key=rank, reverse=True)
        chosen, covered = [], 0
        for key in order:
            chosen.append(key)
            covered += counts[key]
            if covered >= coverage * total:
                break
        weights = np.asarray([counts[k] for k in chosen], np.float64)
        weights /= weights.sum()
        return TargetWorkload(tuple(first[k] for k in chosen), tuple(float(w) for w in weights))


class ShapeTable:
    """The target workload resolved against one state epoch: ``[N, M, W]`` eligibility and needs.

    Shapes that behave identically here are merged, which is exact and keeps ``M`` (the cost of
    every evaluation) small: shapes with the same amounts and the same eligible devices become one
    row with their weights summed; shapes that no node can ever take (no eligible devices, or
    fewer than they need on every node) leave all idle capacity as fragment, exactly like CPU-only
    shapes, so they join the CPU-only row.
    """

    def __init__(
        self, state: ClusterState, pipeline: Eligibility, workload: TargetWorkload
    ) -> None:
        self.epoch = state.epoch
        rows: dict[object, int] = {}
        weights: list[float] = []
        eligible: list[BoolArray] = []
        need_mib: list[IntArray] = []
        need_core: list[int] = []
        count: list[int] = []
        cpu: list[int] = []
        memory: list[int] = []
        n, w = state.dev_present.shape
        none = np.zeros((n, w), np.bool_)
        zeros = np.zeros((n, w), np.int64)
        for shape, weight in zip(workload.shapes, workload.weights, strict=True):
            ctx = pipeline.context(shape)
            mask = pipeline.eligible(ctx) if ctx.k else none
            if ctx.k == 0 or not (mask.sum(axis=1) >= ctx.k).any():
                key: object = "idle"  # frag = all idle capacity, whatever the node's state
                row = (none, zeros, 1, 0, 0, 0)
            else:
                need = np.broadcast_to(np.asarray(ctx.need_mib, np.int64), (n, w))
                row = (mask, need, max(ctx.need_core, 1), ctx.k, shape.cpu_milli, shape.memory_mib)
                key = (row[2:], mask.tobytes(), need.tobytes())
            if key in rows:
                weights[rows[key]] += weight
                continue
            rows[key] = len(weights)
            weights.append(weight)
            eligible.append(row[0])
            need_mib.append(row[1])
            need_core.append(row[2])
            count.append(row[3])
            cpu.append(row[4])
            memory.append(row[5])
        m = len(weights)
        self.weights = np.asarray(weights, np.float64)
        # Node-major [N, M, W] (see the module docstring). Eligibility is folded into the memory
        # need: a device a shape may not use needs NEVER MiB, so one comparison tests both.
        mask = np.asarray(eligible, np.bool_).reshape(m, n, w).transpose(1, 0, 2)
        needs = np.asarray(need_mib, np.int64).reshape(m, n, w).transpose(1, 0, 2)
        self.need_mib: IntArray = np.ascontiguousarray(np.where(mask, needs, NEVER))
        self.need_core = np.asarray(need_core, np.int64)
        self.count = np.asarray(count, np.int64)
        self.cpu = np.asarray(cpu, np.int64)
        self.memory = np.asarray(memory, np.int64)
        self.cpu_only = np.asarray([k == "idle" for k in rows], np.bool_)
        # [N, M]: shapes a node can serve at all; the others only ever see its idle capacity.
        # Nodes that serve the same shapes are one kind (a fleet has a few): evaluations go over
        # the shapes a node's kind serves and add the others' weight times its idle compute.
        relevant: BoolArray = np.asarray(mask.any(axis=2), np.bool_)
        kinds, node_kind = unique_rows(relevant)
        self.node_kind: IntArray = node_kind.reshape(-1)
        served = [np.flatnonzero(row) for row in kinds]
        total = float(self.weights.sum())
        # The table for the compiled loops (``kernels.ShapeArrays``): the kinds'
        # served shapes as one CSR list, and the weight of the shapes each kind does not serve.
        self.arrays = ShapeArrays(
            node_kind=self.node_kind.astype(np.int64),
            kind_ptr=np.concatenate(([0], np.cumsum([shapes.size for shapes in served]))).astype(
                np.int64
            ),
            kind_shapes=np.concatenate([*served, np.zeros(0, np.int64)]).astype(np.int64),
            kind_rest=np.asarray([total - float(self.weights[shapes].sum()) for shapes in served]),
            need_mib=self.need_mib,
            weights=self.weights,
            need_core=self.need_core,
            cards=self.count,
            cpu=self.cpu,
            memory=self.memory,
            device_shape=~self.cpu_only,
        )


@dataclass(frozen=True, slots=True)
class NodeView:
    """Per-shape quantities of selected nodes: T [S], U and cnt [S, M], usable [S, M, W]."""

    idle: IntArray
    usable: BoolArray
    usable_idle: IntArray
    usable_count: IntArray


def node_view(state: ClusterState, table: ShapeTable, nodes: IndexArray) -> NodeView:
    free = state.dev_core_free[nodes]
    usable = share_fits(
        state.dev_mem_free[nodes][:, None],
        free[:, None],
        state.dev_task_free[nodes][:, None],
        table.need_mib[nodes],
        table.need_core[None, :, None],
    )
    return NodeView(
        idle=free.sum(axis=1),
        usable=usable,
        usable_idle=(free[:, None] * usable).sum(axis=2),
        usable_count=usable.sum(axis=2),
    )


def shape_fits(
    table: ShapeTable, usable_count: IntArray, cpu_free: IntArray, mem_free: IntArray
) -> BoolArray:
    """``[S, M]``: can one replica of each shape land on each node (given per-node quantities)?"""
    fits: BoolArray = (
        (usable_count >= table.count[None])
        & (cpu_free[:, None] >= table.cpu[None])
        & (mem_free[:, None] >= table.memory[None])
        & ~table.cpu_only[None]
    )
    return fits


def cpu_capped(
    table: ShapeTable,
    usable_idle: IntArray | FloatArray,
    cpu_free: IntArray,
    mem_free: IntArray,
    shapes: IndexArray | slice | None = None,
) -> FloatArray:
    """``usable_idle`` ([S, M]) capped by what node CPU and memory let the shape use:
    a node whose CPU admits one more task of a shape can fill only one task's worth of its idle
    devices, however many there are; the rest is stranded for that shape."""
    rows = slice(None) if shapes is None else shapes
    per_task = (np.maximum(table.count[rows], 1) * table.need_core[rows]).astype(np.float64)
    cpu = table.cpu[rows].astype(np.float64)
    mem = table.memory[rows].astype(np.float64)
    by_cpu = np.where(cpu[None] > 0, np.floor(cpu_free[:, None] / np.maximum(cpu[None], 1)), np.inf)
    by_mem = np.where(mem[None] > 0, np.floor(mem_free[:, None] / np.maximum(mem[None], 1)), np.inf)
    cap = np.minimum(by_cpu, by_mem) * per_task[None]
    result: FloatArray = np.minimum(usable_idle, cap)
    return result


def settled(fragment: FloatArray) -> FloatArray:
    """``fragment`` rounded to ``SETTLE`` decimals (of a thousandth of a device).

    A node's fragment is a weighted sum of whole thousandths; computed twice, before and after a
    placement that changes nothing, in a different order or with a different number of rows, the
    two sums can differ in the last bits, and a delta of -1e-13 instead of 0 puts the node one
    integer score below its equals (``floor(100 * sigmoid(0))`` is exactly 50). Rounding far below
    any real difference (the least is the smallest shape weight times one thousandth) makes equal
    fragments equal, whatever the summation order."""
    result: FloatArray = np.round(fragment, SETTLE)
    return result


def fragmentation(
    state: ClusterState, table: ShapeTable, nodes: IndexArray, capped: bool = False
) -> FloatArray:
    """``[S]`` expected fragment (thousandths of a device) of each selected node, from scratch in
    plain NumPy: the definition the cached and compiled evaluations are tested against."""
    view = node_view(state, table, nodes)
    cpu, mem = state.node_cpu_free[nodes], state.node_mem_free[nodes]
    return expected_fragment(
        table, view.idle, view.usable_idle, view.usable_count, cpu, mem, capped
    )


def expected_fragment(
    table: ShapeTable,
    idle: IntArray,
    usable_idle: IntArray,
    usable_count: IntArray,
    cpu_free: IntArray,
    mem_free: IntArray,
    capped: bool,
) -> FloatArray:
    """``[S]`` F = sum_m p_m * (T - [m fits] * U_m) from nodes' (or hypothetical nodes') per-shape
    quantities ``T`` [S], ``U`` and ``cnt`` [S, M] and free CPU and memory [S]."""
    fits = shape_fits(table, usable_count, cpu_free, mem_free)
    used = cpu_capped(table, usable_idle, cpu_free, mem_free) if capped else usable_idle
    result: FloatArray = (idle[:, None] - fits * used) @ table.weights
    return result
