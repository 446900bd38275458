"""Compiled inner loops of the fragmentation measure (``measure.py``), of the device pressure's
counts and sums (``pressure.py``), and the knapsack of the share prices (``prices.py``), a
thousand steps per solve.

FGD's evaluation touches a few nodes per request (those that changed since the same amounts were
last scored) over every shape the node serves and every device: arrays of a few thousand elements,
where NumPy spends more time starting its ~20 operations than doing them, and allocates a
temporary for each. These loops do the same arithmetic in one pass, compiled once by Numba
(``cache=True``: the machine code is kept beside the module for the next process). The fragments
they return are FGD's to the last bit where they replaced NumPy expressions that sum the shapes in
order (the FGD reproduction's placements are unchanged), and equal after ``settled`` elsewhere;
``tests/unit/engine/test_fragmentation.py`` and ``test_lookahead.py`` check them against the
plain NumPy definition (``measure.fragmentation``) and against real placements.

``t`` is the shape table's arrays (``ShapeTable.arrays``, a ``ShapeArrays``); the entry points
take it, not the table, so that this module imports nothing of the measure's. The
shapes a node serves are one CSR list over the table's kinds of node (``kind_ptr``,
``kind_shapes``): on a mixed fleet a node serves a fraction of the workload's shapes, and on the
others all its idle compute is fragment (``kind_rest``, their total weight). Per-node scratch
arrays are indexed by a shape's position in its kind's list (``j``), the table's by the shape
(``m``).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from xpupool.engine.capacity import share_fits_one
from xpupool.engine.compiled import jit
from xpupool.engine.state import BoolArray, ClusterState, FloatArray, IntArray

DISPLACED_MIXED, DISPLACED_NONE, DISPLACED_FILLED = 0, 1, 2  # what pressure_displaced found


class ShapeArrays(NamedTuple):
    """The shape table's arrays for the compiled loops (``ShapeTable.arrays``): M shapes, N nodes,
    W cards per node. The loops take them as a plain tuple in this order (``_plain``), indexed by
    the positions below, so that their compiled signatures do not name this class."""

    node_kind: IntArray  # [N] each node's kind
    kind_ptr: IntArray  # [kinds + 1] each kind's start in ``kind_shapes``
    kind_shapes: IntArray  # the shapes each kind serves, one CSR list
    kind_rest: FloatArray  # [kinds] the weight of the shapes a kind does not serve
    need_mib: IntArray  # [N, M, W]
    weights: FloatArray  # [M]
    need_core: IntArray  # [M]
    cards: IntArray  # [M] the cards a shape asks
    cpu: IntArray  # [M]
    memory: IntArray  # [M]
    device_shape: BoolArray  # [M] the shape asks devices


def _plain(t: ShapeArrays) -> tuple[Any, ...]:
    """``t`` as the plain tuple the compiled loops take."""
    return tuple(t)


# Positions in the compiled loops' ``t`` (``_plain``), constants to Numba.
_field = ShapeArrays._fields.index
NODE_KIND, KIND_PTR, KIND_SHAPES = _field("node_kind"), _field("kind_ptr"), _field("kind_shapes")
KIND_REST, NEED_MIB, WEIGHTS = _field("kind_rest"), _field("need_mib"), _field("weights")
NEED_CORE, COUNT, CPU = _field("need_core"), _field("cards"), _field("cpu")
MEMORY, DEVICE_SHAPE = _field("memory"), _field("device_shape")


# ---------------------------------------------------------------------- one node
def _served(
    t: Any, n: Any, core: Any, mem: Any, tasks: Any, usable: Any, used: Any, count: Any
) -> None:
    """FGD's per-shape quantities of node ``n`` with free compute ``core``, memory ``mem`` and task
    slots ``tasks`` per card: for the ``j``-th shape its kind serves, the usable cards
    ``usable[j, w]`` (room for one share: ``capacity.share_fits``), their idle compute ``used[j]``
    and number ``count[j]``."""
    k = t[NODE_KIND][n]
    start = t[KIND_PTR][k]
    for j in range(t[KIND_PTR][k + 1] - start):
        m = t[KIND_SHAPES][start + j]
        total = 0
        cards = 0
        for w in range(core.size):
            ok = share_fits_one(mem[w], core[w], tasks[w], t[NEED_MIB][n, m, w], t[NEED_CORE][m])
            usable[j, w] = ok
            if ok:
                total += core[w]
                cards += 1
        used[j] = total
        count[j] = cards


def _take_card(
    t: Any,
    n: Any,
    card: Any,
    core: Any,
    core_left: Any,
    mem_left: Any,
    tasks_left: Any,
    usable: Any,
    used: Any,
    count: Any,
    used_after: Any,
    count_after: Any,
) -> None:
    """``_served``'s quantities after taking from one ``card`` of node ``n`` (free compute ``core``
    before, ``core_left``, ``mem_left`` and ``tasks_left`` after): only that card's terms change."""
    k = t[NODE_KIND][n]
    start = t[KIND_PTR][k]
    for j in range(t[KIND_PTR][k + 1] - start):
        m = t[KIND_SHAPES][start + j]
        was = usable[j, card]
        now = share_fits_one(
            mem_left, core_left, tasks_left, t[NEED_MIB][n, m, card], t[NEED_CORE][m]
        )
        used_after[j] = used[j] - core * was + core_left * now
        count_after[j] = count[j] - was + now


def _admits(t: Any, k: Any, cpu: Any, mem: Any, capped: Any, admits: Any, cap: Any) -> None:
    """For each shape kind ``k`` serves: can a node with ``cpu`` and ``mem`` free take one (it asks
    devices, and the node's CPU and memory admit it), and the idle compute its CPU and memory let
    the shape use (``measure.cpu_capped``; inf when not capped)."""
    start = t[KIND_PTR][k]
    for j in range(t[KIND_PTR][k + 1] - start):
        m = t[KIND_SHAPES][start + j]
        shape_cpu, shape_memory = t[CPU][m], t[MEMORY][m]
        admits[j] = cpu >= shape_cpu and mem >= shape_memory and t[DEVICE_SHAPE][m]
        limit = np.inf
        if capped:
            if shape_cpu > 0:
                limit = np.floor(cpu / max(shape_cpu, 1))
            if shape_memory > 0:
                limit = min(limit, np.floor(mem / max(shape_memory, 1)))
            limit *= float(max(t[COUNT][m], 1) * t[NEED_CORE][m])
        cap[j] = limit


def _fragment(t: Any, k: Any, idle: Any, used: Any, count: Any, admits: Any, cap: Any) -> float:
    """FGD's F of a node of kind ``k`` from its idle compute and ``_served``'s quantities:
    ``sum_m p_m * (T - [m fits] * U_m)``, the shapes in order, plus all idle compute for the
    shapes the kind does not serve."""
    start = t[KIND_PTR][k]
    total = 0.0
    for j in range(t[KIND_PTR][k + 1] - start):
        m = t[KIND_SHAPES][start + j]
        if admits[j] and count[j] >= t[COUNT][m]:
            total += t[WEIGHTS][m] * (idle - min(float(used[j]), cap[j]))
        else:
            total += t[WEIGHTS][m] * idle
    result: float = total + t[KIND_REST][k] * idle
    return result


def _quantities(t: Any, width: Any) -> Any:
    """Scratch for ``_served``'s quantities of one node: ``usable`` [J, W], ``used``, ``count`` [J],
    J the most shapes any kind serves."""
    most = np.max(t[KIND_PTR][1:] - t[KIND_PTR][:-1])
    return np.empty((most, width), np.bool_), np.empty(most, np.int64), np.empty(most, np.int64)


def _limits(t: Any) -> Any:
    """Scratch for ``_admits``'s ``admits`` and ``cap`` [J] of one node."""
    most = np.max(t[KIND_PTR][1:] - t[KIND_PTR][:-1])
    return np.empty(most, np.bool_), np.empty(most, np.float64)


def _settle(fragment: Any) -> float:
    """``measure.settled`` of one value (NumPy rounds as ``rint(x * 10**d) / 10**d``)."""
    result: float = np.rint(fragment * 1e6) / 1e6
    return result


# ---------------------------------------------------------------------- many nodes
def _refresh(
    t: Any, nodes: Any, core: Any, mem: Any, tasks: Any, cpu: Any, nmem: Any, node_version: Any,
    capped: Any, idle: Any, usable: Any, usable_idle: Any, usable_count: Any, values: Any,
    version: Any,
) -> int:  # fmt: skip
    """``refresh`` in place; the number of nodes recomputed."""
    mine, used, count = _quantities(t, core.shape[1])
    admits, cap = _limits(t)
    done = 0
    for i in range(nodes.size):
        n = nodes[i]
        if version[n] == node_version[n]:
            continue
        total = core[n].sum()
        _served(t, n, core[n], mem[n], tasks[n], mine, used, count)
        k = t[NODE_KIND][n]
        start = t[KIND_PTR][k]
        for j in range(t[KIND_PTR][k + 1] - start):
            m = t[KIND_SHAPES][start + j]
            usable[n, m] = mine[j]
            usable_idle[n, m] = used[j]
            usable_count[n, m] = count[j]
        _admits(t, k, cpu[n], nmem[n], capped, admits, cap)
        idle[n] = total
        values[n] = _settle(_fragment(t, k, float(total), used, count, admits, cap))
        version[n] = node_version[n]
        done += 1
    return done


def _each_card(
    t: Any, n: Any, k: Any, idle: Any, core: Any, free: Any, mem_left: Any, tasks_left: Any,
    usable: Any, usable_idle: Any, usable_count: Any, admits: Any, cap: Any, totals: Any,
) -> None:  # fmt: skip
    """Node ``n``'s fragment (less its kind's rest) after taking ``core`` thousandths from each one
    of its cards in turn, into ``totals[w]``: the cards had ``free`` compute and will have
    ``mem_left`` MiB and ``tasks_left`` slots; ``idle`` is the node's idle compute after.
    ``_take_card`` then ``_fragment`` per card, in one pass over the shapes: a shape the card did
    not serve before serves it no better with less (the capacity rule only compares what is free
    with what is asked), so its term is the node's own, computed once. The same terms, added in
    the same order, as the two loops would: the same bits."""
    start = t[KIND_PTR][k]
    width = free.size
    totals[:] = 0.0
    for j in range(t[KIND_PTR][k + 1] - start):
        m = t[KIND_SHAPES][start + j]
        weight, cards, need_core = t[WEIGHTS][m], t[COUNT][m], t[NEED_CORE][m]
        used, count = usable_idle[n, m], usable_count[n, m]
        ok, limit = admits[j], cap[j]
        fits = ok and count >= cards
        same = weight * (idle - min(float(used), limit)) if fits else weight * idle
        for w in range(width):
            if not usable[n, m, w]:
                totals[w] += same
                continue
            left = free[w] - core
            now = share_fits_one(mem_left[w], left, tasks_left[w], t[NEED_MIB][n, m, w], need_core)
            if ok and count - 1 + now >= cards:
                totals[w] += weight * (idle - min(float(used - free[w] + left * now), limit))
            else:
                totals[w] += weight * idle


def _one_card_after(
    t: Any, nodes: Any, dev_core_free: Any, dev_mem_free: Any, dev_task_free: Any, cpu_free: Any,
    mem_free: Any, usable: Any, usable_idle: Any, usable_count: Any, idle: Any, core: Any, mib: Any,
    mib_grid: Any, cpu: Any, nmem: Any, capped: Any, out: Any, version: Any, node_version: Any,
) -> int:  # fmt: skip
    """``one_card_after`` into ``out``: row ``i`` for ``nodes[i]``, or, given ``version``, row
    ``n`` for node ``n`` where ``version[n]`` is not the state's (then brought up to date, and
    settled, as it is kept). The number of nodes computed."""
    width = dev_core_free.shape[1]
    admits, cap = _limits(t)
    mem_left = np.empty(width, np.int64)
    tasks_left = np.empty(width, np.int64)
    totals = np.empty(width, np.float64)
    in_place = version.size > 0
    done = 0
    for i in range(nodes.size):
        n = nodes[i]
        if in_place and version[n] == node_version[n]:
            continue
        row = n if in_place else i
        k = t[NODE_KIND][n]
        _admits(t, k, cpu_free[n] - cpu, mem_free[n] - nmem, capped, admits, cap)
        for w in range(width):
            mem_left[w] = dev_mem_free[n, w] - (mib if mib_grid.shape[0] == 0 else mib_grid[n, w])
            tasks_left[w] = dev_task_free[n, w] - 1
        left_idle = float(idle[n] - core)
        _each_card(
            t, n, k, left_idle, core, dev_core_free[n], mem_left, tasks_left, usable, usable_idle,
            usable_count, admits, cap, totals,
        )  # fmt: skip
        rest = t[KIND_REST][k] * left_idle
        for w in range(width):
            after = totals[w] + rest
            out[row, w] = _settle(after) if in_place else after
        if in_place:
            version[n] = node_version[n]
        done += 1
    return done


def _node_after(
    t: Any, nodes: Any, dev_fit: Any, dev_core_free: Any, dev_mem_free: Any, dev_task_free: Any,
    cpu_free: Any, mem_free: Any, usable_idle: Any, usable_count: Any, idle: Any, cards: Any,
    core: Any, mib: Any, mib_grid: Any, cpu: Any, nmem: Any, capped: Any, out: Any, version: Any,
    node_version: Any,
) -> int:  # fmt: skip
    """``node_after`` into ``out``: entry ``i`` for ``nodes[i]``, or, given ``version``, entry
    ``n`` for node ``n`` where ``version[n]`` is not the state's (then brought up to date, and
    settled). The number of nodes computed."""
    width = dev_core_free.shape[1]
    scratch, used, count = _quantities(t, width)
    admits, cap = _limits(t)
    core_after = np.empty(width, np.int64)
    mem_after = np.empty(width, np.int64)
    tasks_after = np.empty(width, np.int64)
    in_place = version.size > 0
    done = 0
    for i in range(nodes.size):
        n = nodes[i]
        if in_place and version[n] == node_version[n]:
            continue
        k = t[NODE_KIND][n]
        if cards == 0:  # nothing device-side changes: the node's kept quantities
            start = t[KIND_PTR][k]
            for j in range(t[KIND_PTR][k + 1] - start):
                m = t[KIND_SHAPES][start + j]
                used[j] = usable_idle[n, m]
                count[j] = usable_count[n, m]
            left_idle = idle[n]
        else:  # the first ``cards`` fitting cards, as FGD takes them
            taken = 0
            left_idle = 0
            for w in range(width):
                core_after[w], mem_after[w] = dev_core_free[n, w], dev_mem_free[n, w]
                tasks_after[w] = dev_task_free[n, w]
                if dev_fit[n, w] and taken < cards:
                    core_after[w] -= core
                    mem_after[w] -= mib if mib_grid.shape[0] == 0 else mib_grid[n, w]
                    tasks_after[w] -= 1
                    taken += 1
                left_idle += core_after[w]
            _served(t, n, core_after, mem_after, tasks_after, scratch, used, count)
        _admits(t, k, cpu_free[n] - cpu, mem_free[n] - nmem, capped, admits, cap)
        after = _fragment(t, k, float(left_idle), used, count, admits, cap)
        out[n if in_place else i] = _settle(after) if in_place else after
        if in_place:
            version[n] = node_version[n]
        done += 1
    return done


def _best_deltas(
    t: Any, nodes: Any, core: Any, mem: Any, tasks: Any, cpu: Any, nmem: Any, ok: Any, rows: Any,
    capped: Any, out: Any,
) -> None:  # fmt: skip
    """``best_deltas`` into ``out`` [B, J]."""
    width = core.shape[1]
    mine, used, count = _quantities(t, width)
    scratch, used_after, count_after = _quantities(t, width)
    admits, cap = _limits(t)
    admits_after, cap_after = _limits(t)
    fits = np.empty(width, np.bool_)
    core_after = np.empty(width, np.int64)
    mem_after = np.empty(width, np.int64)
    tasks_after = np.empty(width, np.int64)
    for b in range(nodes.size):
        n = nodes[b]
        k = t[NODE_KIND][n]
        idle = core[b].sum()
        _served(t, n, core[b], mem[b], tasks[b], mine, used, count)
        _admits(t, k, cpu[b], nmem[b], capped, admits, cap)
        before = _settle(_fragment(t, k, float(idle), used, count, admits, cap))
        for r in range(rows.size):
            s = rows[r]
            out[b, r] = -np.inf
            room = 0
            for w in range(width):
                fits[w] = share_fits_one(
                    mem[b, w], core[b, w], tasks[b, w], t[NEED_MIB][n, s, w], t[NEED_CORE][s]
                )
                room += fits[w]
            cpu_left, nmem_left = cpu[b] - t[CPU][s], nmem[b] - t[MEMORY][s]
            if not ok[b] or cpu_left < 0 or nmem_left < 0 or room < t[COUNT][s]:
                continue
            _admits(t, k, cpu_left, nmem_left, capped, admits_after, cap_after)
            if t[COUNT][s] == 1:  # on each card with room: only that card changes
                for c in range(width):
                    if fits[c]:
                        left = core[b, c] - t[NEED_CORE][s]
                        mem_left = mem[b, c] - t[NEED_MIB][n, s, c]
                        _take_card(
                            t, n, c, core[b, c], left, mem_left, tasks[b, c] - 1, mine, used,
                            count, used_after, count_after,
                        )  # fmt: skip
                        idle_after = float(idle - t[NEED_CORE][s])
                        after = _fragment(
                            t, k, idle_after, used_after, count_after, admits_after, cap_after
                        )
                        out[b, r] = max(out[b, r], before - _settle(after))
                continue
            taken = 0  # on the first k cards with room, afresh
            for w in range(width):
                core_after[w], mem_after[w], tasks_after[w] = core[b, w], mem[b, w], tasks[b, w]
                if fits[w] and taken < t[COUNT][s]:
                    core_after[w] -= t[NEED_CORE][s]
                    mem_after[w] -= t[NEED_MIB][n, s, w]
                    tasks_after[w] -= 1
                    taken += 1
            _served(t, n, core_after, mem_after, tasks_after, scratch, used_after, count_after)
            idle_after = float(idle - taken * t[NEED_CORE][s])
            after = _fragment(t, k, idle_after, used_after, count_after, admits_after, cap_after)
            out[b, r] = before - _settle(after)


def _pressure_counts(
    nodes: Any, version: Any, node_version: Any, plain: Any, node_class: Any, core: Any,
    tasks: Any, thresholds: Any, plain_idle: Any, node_idle: Any,
) -> int:  # fmt: skip
    """``pressure_counts`` in place."""
    moved = 0
    for i in range(nodes.size):
        n = nodes[i]
        if version[n] == node_version[n]:
            continue
        version[n] = node_version[n]
        moved += 1
        if not plain[n]:
            continue
        c = node_class[n]
        for j in range(thresholds.size):
            now = 0
            for w in range(core.shape[1]):
                if share_fits_one(0, core[n, w], tasks[n, w], 0, thresholds[j]):
                    now += core[n, w]
            plain_idle[c, j] += now - node_idle[n, j]
            node_idle[n, j] = now
    return moved


def _per_unit(
    usable: Any, class_groups: Any, group_column: Any, group_share: Any, out: Any
) -> None:
    """``pressure_per_unit`` into ``out``."""
    total = 0.0
    for c in range(usable.shape[0]):
        total += usable[c, 0]
    for g in range(group_share.size):
        idle = 0.0
        column = group_column[g]
        for c in range(usable.shape[0]):
            if class_groups[c, g] != 0.0:
                idle += usable[c, column]
        out[g] = group_share[g] * total / max(idle, 1.0)


def _displaced(nodes: Any, node_class: Any, rho: Any, need: Any, out: Any) -> int:
    """``pressure_displaced`` into ``out``."""
    if nodes.size == 0:
        return DISPLACED_NONE
    first = node_class[nodes[0]]
    alike = True
    for i in range(nodes.size):
        c = node_class[nodes[i]]
        if c < -1:
            return DISPLACED_MIXED
        alike = alike and c == first
    if alike:
        return DISPLACED_NONE
    low, high = np.inf, -np.inf
    for i in range(nodes.size):
        c = node_class[nodes[i]]
        p = rho[c if c >= 0 else rho.size - 1]
        out[i] = p
        low = min(low, p)
        high = max(high, p)
    if high <= low:
        return DISPLACED_NONE
    for i in range(nodes.size):
        out[i] = min(out[i] - low, 1.0) * need  # >= 0: low is the least
    return DISPLACED_FILLED


def _knapsack(sizes: Any, prices: Any, card: Any, value: Any, last: Any) -> None:
    """Unbounded knapsack over one card (``prices.py``): ``value[h]`` the most that
    ``sizes`` fitting in ``h`` are worth at ``prices``, ``last[h]`` the size taken last there (-1:
    the best at ``h`` is the best at ``h - 1``), ``h = 0..card``."""
    value[0], last[0] = 0.0, -1
    for h in range(1, card + 1):
        value[h], last[h] = value[h - 1], -1
        for i in range(sizes.size):
            s = sizes[i]
            if s <= h and value[h - s] + prices[i] > value[h] + 1e-9:
                value[h], last[h] = value[h - s] + prices[i], i


# The helpers first: the loops that call them find them compiled when they compile.
_served = jit(_served)
_take_card = jit(_take_card)
_each_card = jit(_each_card)
_admits = jit(_admits)
_quantities = jit(_quantities)
_limits = jit(_limits)
_fragment = jit(_fragment)
_settle = jit(_settle)


def _merge_top(
    nodes: Any,
    deltas: Any,
    top_value: Any,
    top_node: Any,
    second_value: Any,
    second_node: Any,
    dirty: Any,
) -> None:
    """The lookahead's kept best and runner-up of each next shape (``lookahead.py``) brought up
    to date with the new best deltas ``deltas`` ``[B, J]`` of distinct ``nodes``. The other nodes
    kept their values, so the two are the best two of the old two and the new values, unless one
    of the old two is among ``nodes`` (its value may have fallen) or a value is NaN: that shape
    is marked for a recomputation."""
    for j in range(top_value.size):
        if dirty[j]:
            continue
        for b in range(nodes.size):
            if (
                nodes[b] == top_node[j]
                or nodes[b] == second_node[j]
                or deltas[b, j] != deltas[b, j]
            ):
                dirty[j] = True
                break
        if dirty[j]:
            continue
        for b in range(nodes.size):
            v = deltas[b, j]
            if v > top_value[j]:
                second_value[j], second_node[j] = top_value[j], top_node[j]
                top_value[j], top_node[j] = v, nodes[b]
            elif v > second_value[j]:
                second_value[j], second_node[j] = v, nodes[b]


_refresh_jit = jit(_refresh)
_one_card_after_jit = jit(_one_card_after)
_node_after_jit = jit(_node_after)
_best_deltas_jit = jit(_best_deltas)
_knapsack_jit = jit(_knapsack)
_pressure_counts_jit = jit(_pressure_counts)
_per_unit_jit = jit(_per_unit)
_displaced_jit = jit(_displaced)
merge_top = jit(_merge_top)


# ---------------------------------------------------------------------- typed entry points
def refresh(
    nodes: IntArray,
    t: ShapeArrays,
    state: ClusterState,
    capped: bool,
    quantities: tuple[IntArray, BoolArray, IntArray, IntArray],
    values: FloatArray,
    version: IntArray,
) -> int:
    """Bring the kept measure of ``nodes`` up to date in place, skipping those whose ``version``
    is the state's (repeats and unchanged nodes cost a comparison): per node its ``T``,
    ``usable``, ``U`` and ``cnt`` for the shapes its kind serves (``quantities``, [N], [N, M, W],
    [N, M], [N, M]: the others stay zero), its settled fragment into ``values`` and its version.
    The fragment is ``measure.expected_fragment``'s, settled, from one pass over each node instead
    of a dozen NumPy operations over a handful of rows. Returns how many nodes it recomputed."""
    if not nodes.size:  # and no scratch sized by the node kinds (there may be none)
        return 0
    idle, usable, usable_idle, usable_count = quantities
    done: int = _refresh_jit(
        _plain(t), nodes, state.dev_core_free, state.dev_mem_free, state.dev_task_free,
        state.node_cpu_free, state.node_mem_free, state.node_version, capped, idle, usable,
        usable_idle, usable_count, values, version,
    )  # fmt: skip
    return done


class Replica(NamedTuple):
    """What the compiled loops take of a replica: compute per card (thousandths), MiB per card (an
    int, or ``[N, W]`` per card of each node), and its node's CPU and memory."""

    core: int
    mib: int | IntArray
    cpu: int
    memory: int


NO_VERSION = np.zeros(0, np.int64)
_NO_GRID = np.zeros((0, 0), np.int64)
_NO_FIT = np.zeros((0, 0), np.bool_)


def one_card_after(
    nodes: IntArray,
    t: ShapeArrays,
    state: ClusterState,
    cached: tuple[BoolArray, IntArray, IntArray, IntArray],
    replica: Replica,
    capped: bool,
    out: FloatArray,
    version: IntArray = NO_VERSION,
) -> int:
    """The fragment of each node after placing a one-device ``replica`` on each of its devices;
    ``cached`` = the whole fleet's ``usable``, ``U``, ``cnt`` and ``T``
    (``FragmentationCache.cached``). Into row ``i`` of ``out`` [S, W] for ``nodes[i]``; or, given
    the ``version`` [N] each row of ``out`` [N, W] was computed at, settled into row ``n`` for each
    node ``n`` of ``nodes`` whose version is not the state's, which it then takes (repeats and
    current nodes cost a comparison). Values for devices the replica does not fit are
    meaningless; the caller masks them. Returns how many nodes were computed."""
    if not nodes.size:  # and no scratch sized by the node kinds (there may be none)
        return 0
    usable, usable_idle, usable_count, idle = cached
    core, mib, cpu, memory = replica
    scalar, grid = (mib, _NO_GRID) if isinstance(mib, int) else (0, mib)
    done: int = _one_card_after_jit(
        _plain(t), nodes, state.dev_core_free, state.dev_mem_free, state.dev_task_free,
        state.node_cpu_free, state.node_mem_free, usable, usable_idle, usable_count, idle, core,
        scalar, grid, cpu, memory, capped, out, version, state.node_version,
    )  # fmt: skip
    return done


def node_after(
    nodes: IntArray,
    t: ShapeArrays,
    state: ClusterState,
    cached: tuple[BoolArray, IntArray, IntArray, IntArray],
    cards: tuple[int, BoolArray | None],
    replica: Replica,
    capped: bool,
    out: FloatArray,
    version: IntArray = NO_VERSION,
) -> int:
    """The fragment of each node after placing a ``replica`` of ``cards`` = (k, fit) other than
    one card (k = 0: CPU and memory only) on the first k cards that ``fit`` it ([N, W]), as FGD
    places it. Into ``out`` [S], or kept in ``out`` [N] by ``version`` as
    :func:`one_card_after` keeps its own. Returns how many nodes were computed."""
    if not nodes.size:  # and no scratch sized by the node kinds (there may be none)
        return 0
    _, usable_idle, usable_count, idle = cached
    count, fit = cards
    core, mib, cpu, memory = replica
    scalar, grid = (mib, _NO_GRID) if isinstance(mib, int) else (0, mib)
    done: int = _node_after_jit(
        _plain(t), nodes, _NO_FIT if fit is None else fit, state.dev_core_free,
        state.dev_mem_free, state.dev_task_free, state.node_cpu_free, state.node_mem_free,
        usable_idle, usable_count, idle, count, core, scalar, grid, cpu, memory, capped, out,
        version, state.node_version,
    )  # fmt: skip
    return done


def best_deltas(
    nodes: IntArray,
    free: tuple[IntArray, IntArray, IntArray, IntArray, IntArray, BoolArray],
    rows: IntArray,
    t: ShapeArrays,
    capped: bool,
) -> FloatArray:
    """``[B, J]`` each shape ``rows[j]``'s best settled FGD delta on each base node, given its
    ``free`` = (device compute, memory and task slots [B, W], CPU [B], memory [B], schedulable
    [B]);
    -inf where the shape does not land (the lookahead's ``B_j``, ``lookahead.py``). A
    one-card shape is tried on each card with room, a shape of several cards on the first ``k``
    cards with room, as FGD places them."""
    out = np.empty((nodes.size, rows.size), np.float64)
    _best_deltas_jit(_plain(t), nodes, *free, rows, capped, out)
    return out


_warm = False


def pressure_counts(
    nodes: IntArray,
    state: ClusterState,
    version: IntArray,
    plain: BoolArray,
    node_class: IntArray,
    thresholds: IntArray,
    plain_idle: IntArray,
    node_idle: IntArray,
) -> int:
    """The device pressure's usable idle kept in place (``pressure.py``): of ``nodes`` (repeats
    and current nodes cost a comparison), each one whose ``version`` is not the state's takes it,
    and each such ``plain`` node's compute on cards with at least each of ``thresholds`` free and
    a task slot (the capacity rule) replaces its row of ``node_idle`` [N, J] and its share of its
    class's row of ``plain_idle`` [C, J]. Returns how many nodes moved."""
    moved: int = _pressure_counts_jit(
        nodes, version, state.node_version, plain, node_class, state.dev_core_free,
        state.dev_task_free, thresholds, plain_idle, node_idle,
    )  # fmt: skip
    return moved


def pressure_per_unit(
    usable: IntArray | FloatArray,
    class_groups: FloatArray,
    group_column: IntArray,
    group_share: FloatArray,
) -> FloatArray:
    """``[G]`` the device pressure's demand per unit of usable idle (``pressure.py``): per group
    ``g``, ``share[g] * I / max(U_g, 1)`` with ``I`` the idle of every class (column 0 of
    ``usable`` [C, J]) and ``U_g`` the idle at the group's threshold (``group_column``) of the
    classes it may use (``class_groups`` [C, G], 0 or 1). The idle counts are integers, so their
    sums are exact in any order: the same bits as the NumPy expression, in one pass."""
    out = np.empty(group_share.size, np.float64)
    _per_unit_jit(usable, class_groups, group_column, group_share, out)
    return out


def pressure_displaced(
    nodes: IntArray, node_class: IntArray, rho: FloatArray, need: int, out: FloatArray
) -> int:
    """The device pressure's displaced demand when each of ``nodes`` has cards of one class
    (``node_class``; -1, cards no shape may use, reads the last of ``rho``): into ``out`` [S]
    ``need * min(1, rho - rho_min)`` and ``DISPLACED_FILLED``; ``DISPLACED_NONE`` when it is 0
    everywhere (one class, or all alike); ``DISPLACED_MIXED`` when some node has cards of several
    classes (the caller compares card by card). One pass for a dozen small array operations, to
    the same bits."""
    found: int = _displaced_jit(nodes, node_class, rho, float(need), out)
    return found


def knapsack(sizes: IntArray, prices: FloatArray, card: int) -> tuple[FloatArray, IntArray]:
    """``(value, last)`` of the unbounded knapsack of ``sizes`` at ``prices`` for ``h = 0..card``."""
    value = np.zeros(card + 1, np.float64)
    last = np.full(card + 1, -1, np.int64)
    _knapsack_jit(sizes.astype(np.int64), prices.astype(np.float64), card, value, last)
    return value, last


def warm(*, solver: bool = True) -> None:
    """Compile the loops now (or load them from the cache), once per process, on a one-node table
    of the types the engine passes, and (``solver``) import the LP solver of the share prices
    (:func:`warm_solver`). A server starts this before it takes requests: done on the first
    request instead, each is a stall that queues every request behind it."""
    _warm_loops()
    if solver:
        warm_solver()


def _warm_loops() -> None:
    global _warm
    if _warm:
        return
    i64, f64 = np.int64, np.float64
    ints, ones = np.zeros(1, i64), np.ones(1, i64)
    kinds = (ints, np.array([0, 1], i64), ints, np.zeros(1, f64))
    sample = ShapeArrays(
        *kinds, np.zeros((1, 1, 1), i64), np.ones(1, f64), ones, ones, ints, ints, ones > 0
    )
    t = _plain(sample)
    grid = np.zeros((1, 1), i64)
    cached = (np.zeros((1, 1, 1), np.bool_), grid, grid, ints)
    floats = np.zeros(1, f64)
    _refresh_jit(
        t, ints, grid, grid, grid, ints, ints, ints, True, ints, *cached[:1], grid, grid, floats,
        ints,
    )  # fmt: skip
    _one_card_after_jit(
        t, ints, grid, grid, grid, ints, ints, *cached, 0, 0, grid, 0, 0, True, np.zeros((1, 1)),
        ints, ints,
    )  # fmt: skip
    ok = np.ones(1, np.bool_)
    _node_after_jit(
        t, ints, grid > 0, grid, grid, grid, ints, ints, grid, grid, ints, 0, 0, 0, grid, 0, 0,
        True, np.zeros(1), ints, ints,
    )  # fmt: skip
    _best_deltas_jit(t, ints, grid, grid, grid, ints, ints, ok, ints, True, np.zeros((1, 1)))
    merge_top(ints, np.zeros((1, 1)), floats, ints, floats.copy(), ints.copy(), ok.copy())
    knapsack(ones, np.ones(1, f64), 1)
    _pressure_counts_jit(ints, ints, ints, ok, ints, grid, grid, ones, grid, grid)
    pressure_displaced(ints, ints, floats, 1, np.empty(1, f64))
    for usable in (grid, np.zeros((1, 1), f64)):  # plain nodes' counts, or with others
        pressure_per_unit(usable, np.ones((1, 1), f64), ints, floats)
    _warm = True


def warm_solver() -> None:
    """Import the LP solver of the share prices (``prices.py`` imports it where it first prices a
    share, which a request would wait for): SciPy's import is slow, 0.4 CPU s here, and the
    engine's import does not pay it."""
    import scipy.optimize  # noqa: F401
