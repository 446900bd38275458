"""Device pressure: how contended each device is by the target workload, given who may use it.

FGD's fragmentation counts the idle capacity a shape *cannot* use as fragment, so consuming capacity
that many shapes cannot use looks good to it, even when the few shapes that *can* use it have
nowhere else to go (a job that asks for a T4, a V100 or a given driver). In a mixed fleet with
hardware constraints that spends the scarce cards on jobs that could have run anywhere, and the
constrained jobs then fail.

Shapes that may use the same devices and need the same compute per device form a group. Each group
spreads its share of the workload's device demand over the capacity it can use, in proportion; the
pressure of a device is the resulting expected demand per unit of idle capacity:

    q_g      = share of the workload's device demand (weight x devices x compute) of group g
    U_g      = idle compute on the devices group g may use that have at least its per-device need
               free (a whole-card shape can use only whole cards)
    I        = idle compute of the fleet
    rho(d)   = sum over groups g that may use d of  q_g * I / U_g

A shape may use the devices its selectors accept (model, vendor, UUID, card size, software), and
only those on nodes that can ever host it (enough such cards, total CPU and memory) when the shapes
with those hosts ask a larger share of the demand than the hosts' share of their cards: 8-card
jobs asking more cores than most 8-card nodes have contend for the few that do, and the cards of
those nodes are priced so (``_usable_cards``).

When every shape may use every device, all devices have the same pressure and nothing changes. A
replica that takes ``c`` thousandths of device ``d``, when it could have used a device of pressure
``rho_min``, takes ``c * min(1, rho(d) - rho_min)`` away from demand that has fewer places to go:
xpupool's ``contention`` scorer counts that as fragment (``engine/scorers/xpupool/``). Because
``U_g`` counts only usable capacity, breaking whole cards of a model raises its pressure for the
jobs that need whole cards of it, and shares move on to other models instead of breaking them all.

Cost: devices fall into a few classes (the set of groups that may use them, in practice a model or
a model and driver); usable idle per class, at each group's threshold, is kept per node and adjusted
only for nodes whose version moved, so a placement costs a few small array operations, not a pass
over the fleet.
"""

from __future__ import annotations

import numpy as np

from xpupool.engine.capacity import cores_fit, slot_free
from xpupool.engine.fragmentation.kernels import (
    DISPLACED_FILLED,
    DISPLACED_MIXED,
    pressure_counts,
    pressure_displaced,
    pressure_per_unit,
)
from xpupool.engine.fragmentation.measure import NEVER, IndexArray, ShapeTable
from xpupool.engine.fragmentation.row_kinds import unique_rows
from xpupool.engine.state import BoolArray, ClusterState, FloatArray, IntArray


class DevicePressure:
    """``rho`` per device class for the state's current usage; rebuilt with its shape table."""

    def __init__(self, state: ClusterState, table: ShapeTable) -> None:
        self.state = state
        self.table = table
        n, w = state.dev_present.shape
        groups: dict[bytes, int] = {}
        members: list[np.ndarray] = []
        demand: list[float] = []
        per_card: list[int] = []  # per group: the compute its shapes need on one card
        for m, mask in _usable_cards(state, table).items():
            need = int(table.need_core[m])
            key = mask.tobytes() + need.to_bytes(8, "little")
            share = float(table.weights[m] * table.count[m] * need)
            if key in groups:
                demand[groups[key]] += share
            else:
                groups[key] = len(members)
                members.append(mask)
                demand.append(share)
                per_card.append(need)
        total = sum(demand)
        # Device classes: devices that the same groups may use. Class -1 is "no group", ignored.
        self.active = len(members) > 1 and total > 0
        self.dev_class: IntArray = np.full((n, w), -1, np.int64)
        self.class_groups = np.zeros((0, len(members)), np.float64)  # [C, G] incidence
        self.group_share = np.asarray(demand, np.float64) / (total or 1.0)
        if self.active:
            stacked = np.stack(members, axis=-1)  # [N, W, G]
            used = stacked.any(axis=-1)
            packed = np.packbits(stacked[used], axis=-1)
            signatures, inverse = unique_rows(packed)
            self.dev_class[used] = inverse.reshape(-1)
            incidence = np.unpackbits(signatures, axis=-1, count=len(members))
            self.class_groups = incidence.astype(np.float64)
            self.active = signatures.shape[0] > 1
        self._classes = self.class_groups.shape[0]
        # Usable idle is counted at a few thresholds: column 0 is all idle compute (>= 1), then
        # one per distinct per-card need; a group reads the column of its own need.
        self._thresholds = np.asarray(sorted({1, *per_card}), np.int64)
        self._group_column = np.searchsorted(self._thresholds, np.asarray(per_card, np.int64))
        # Per node: its cards' class when they all share one (-1: no shape may use any), else -2.
        present = np.where(state.dev_present, self.dev_class, -3)
        first = np.where(state.dev_present.any(axis=1), present.max(axis=1), -1)
        uniform = ((present == first[:, None]) | (present == -3)).all(axis=1)
        self.node_class: IntArray = np.where(uniform, first, -2)
        # Nodes whose idle is their class's: one class, every card usable; the others ("special")
        # are counted card by card at every evaluation (few, on a real fleet).
        plain = (self.node_class >= 0) & (state.dev_usable == state.dev_present).all(axis=1)
        self._is_plain = plain
        # Usable idle per class and threshold summed over plain nodes, and each plain node's as
        # last counted; kept current from the nodes whose version moved.
        j = self._thresholds.size
        self._plain_idle = np.zeros((self._classes, j), np.int64)
        self._node_idle = np.zeros((n, j), np.int64)
        self._version = np.full(n, -1, np.int64)
        self._rho: FloatArray | None = None
        self._seq, self._epoch = -1, -1  # the state's change number and epoch when last counted
        self._special: IntArray = np.flatnonzero(~plain & (self.node_class != -1))

    def of(self, nodes: IndexArray) -> FloatArray:
        """``[S, W]`` pressure of the devices of ``nodes`` now (0 on devices no shape may use)."""
        out: FloatArray = self._class_pressure()[self.dev_class[nodes]]
        return out

    def displaced(self, nodes: IndexArray, fit: BoolArray, need: int) -> FloatArray | None:
        """Thousandths of contended demand that ``need`` on a fitting device (``fit``, ``[N, W]``)
        takes from shapes with fewer places to go: ``need * min(1, rho(d) - rho_min)``, with
        ``rho_min`` over the fitting devices. ``[S]`` per node when every node's cards are of one
        class (the usual case), else ``[S, W]``; None when it is 0 everywhere."""
        out: FloatArray = np.empty(nodes.size, np.float64)
        # One class per node (the usual case): a gather of [S], not [S, W]. One class in all
        # (e.g. a request for one model) or one pressure: nothing to compare.
        found = pressure_displaced(nodes, self.node_class, self._class_pressure(), need, out)
        if found != DISPLACED_MIXED:
            return out if found == DISPLACED_FILLED else None
        fits = fit[nodes]
        per = np.where(fits, self.of(nodes), np.inf)
        low = float(per.min())
        if float(np.where(fits, per, low).max()) <= low:
            return None
        result: FloatArray = np.minimum(np.maximum(per - low, 0.0), 1.0) * float(need)  # clip
        return result

    def _usable(self, free: IntArray, tasks: IntArray) -> IntArray:
        """``[..., J]``: compute on cards with at least each threshold free and a task slot, of
        ``[..., W]`` cards with ``free`` compute and ``tasks`` slots (memory is not the pressure's:
        the groups are made of compute needs)."""
        above = cores_fit(free[..., None, :], self._thresholds[:, None]) & slot_free(
            tasks[..., None, :]
        )
        result: IntArray = (above * free[..., None, :]).sum(axis=-1)
        return result

    def current(self) -> FloatArray:
        """``[C + 1]``: pressure per class now (brought up to date), and 0 last."""
        return self._class_pressure()

    def _class_pressure(self) -> FloatArray:
        """``[C + 1]``: pressure per class now, and 0 last (for class -1)."""
        s = self.state
        nodes = s.changed_nodes(self._seq, self._epoch, self._version)
        moved = pressure_counts(
            nodes, s, self._version, self._is_plain, self.node_class, self._thresholds,
            self._plain_idle, self._node_idle,
        )  # fmt: skip
        self._seq, self._epoch = s.change_seq, s.epoch
        if moved or self._rho is None:
            self._rho = self._pressure()
        return self._rho

    def _pressure(self) -> FloatArray:
        s = self.state
        usable: IntArray | FloatArray = self._plain_idle  # [C, J]
        if self._special.size:  # nodes with cards of several classes, or cards not usable
            usable = usable.astype(np.float64)
            free = np.where(s.dev_usable[self._special], s.dev_core_free[self._special], 0)
            classes = self.dev_class[self._special]
            hit = classes >= 0
            per_card = self._usable(
                free[hit][:, None], s.dev_task_free[self._special][hit][:, None]
            )
            np.add.at(usable, classes[hit], per_card)
        per_unit = pressure_per_unit(
            usable, self.class_groups, self._group_column, self.group_share
        )  # [G]
        rho: FloatArray = np.empty(self._classes + 1, np.float64)
        np.matmul(self.class_groups, per_unit, out=rho[:-1])
        rho[-1] = 0.0
        return rho


def _usable_cards(state: ClusterState, table: ShapeTable) -> dict[int, BoolArray]:
    """``[N, W]`` per device shape: the cards it may use for the pressure.

    Its eligible cards (model, vendor, UUID, card size, software), narrowed to the nodes that can
    ever host it (enough eligible cards for its count, enough total CPU and memory) where the
    shapes with those hosts and its per-card need ask a larger share of the workload's device
    demand than those hosts' share of the shape's eligible cards: then they alone ask more of the
    hosts than the fleet's mean pressure, and the hosts' cards are contended whatever else arrives
    (8-card jobs that ask more cores than most 8-card nodes have). Where hosts are plenty, a limit
    on which nodes can host a shape is left to the fragmentation measure, which sees it as a shape
    that does not fit: narrowing there too priced cards apart by a few percent, which broke the
    seeded ties FGD's spread relies on (docs/placement-policy.md, "Tried").
    """
    device = np.flatnonzero(~table.cpu_only)
    # Shape-major [D, N, W] once, so each shape's cards are a contiguous block, not a strided
    # gather out of the node-major table, which is the slower read with hundreds of shapes.
    eligible = (table.need_mib != NEVER).transpose(1, 0, 2)[device]
    per_node = eligible.sum(axis=2)  # [D, N] eligible cards per node
    hosting = (
        (state.node_cpu_total >= table.cpu[device, None])
        & (state.node_mem_total >= table.memory[device, None])
        & (per_node >= table.count[device, None])
    )  # [D, N] nodes that can ever host the shape
    n_eligible = per_node.sum(axis=1)
    n_hosted = (per_node * hosting).sum(axis=1)
    demand = table.weights[device] * table.count[device] * table.need_core[device]
    shares = demand / (float(demand.sum()) or 1.0)
    keys: list[bytes] = []
    asked: dict[bytes, float] = {}  # demand share per (hosts, per-card need)
    for i, share in enumerate(shares.tolist()):
        hosts = eligible[i] & hosting[i][:, None]
        key = hosts.tobytes() + int(table.need_core[device[i]]).to_bytes(8, "little")
        asked[key] = asked.get(key, 0.0) + share
        keys.append(key)
    cards: dict[int, BoolArray] = {}
    for i, m in enumerate(device.tolist()):
        mask, hosted, total = eligible[i], int(n_hosted[i]), int(n_eligible[i])
        narrow = 0 < hosted < total and asked[keys[i]] > hosted / total
        cards[m] = mask & hosting[i][:, None] if narrow else mask
    return cards
