"""The capacity predicate: its two forms agree, and nobody else decides "a share fits" by hand."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import xpupool
from xpupool.engine import capacity
from xpupool.engine.capacity import (
    UNLIMITED_TASKS,
    cores_fit,
    memory_fits,
    share_fits,
    share_fits_one,
    share_parts_one,
    shares_that_fit,
    slot_free,
)

SOURCES = Path(xpupool.__file__).resolve().parent
amounts = st.integers(-5, 200_000)
slots = st.sampled_from([-1, 0, 1, 2, 7, UNLIMITED_TASKS, UNLIMITED_TASKS - 3])


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(amounts, amounts, slots, amounts, amounts), min_size=1, max_size=40),
)
@pytest.mark.slow
def test_numpy_and_compiled_forms_agree(rows: list[tuple[int, int, int, int, int]]) -> None:
    """The array form, the compiled scalar form and the filters' three parts give one answer."""
    mem, core, tasks, need_mib, need_core = (
        np.asarray(col, np.int64) for col in zip(*rows, strict=True)
    )
    vector = share_fits(mem, core, tasks, need_mib, need_core)
    scalar = [share_fits_one(*row) for row in rows]
    parts = memory_fits(mem, need_mib) & cores_fit(core, need_core) & slot_free(tasks)
    assert vector.tolist() == scalar == parts.tolist()
    assert all(type(x) is bool for x in scalar)
    # the compiled parts, which a refusal uses to say which part fails first, are the same parts
    by_part = [share_parts_one(*row) for row in rows]
    assert [list(p) for p in by_part] == [
        [bool(m), bool(c), bool(t)]
        for m, c, t in zip(
            memory_fits(mem, need_mib), cores_fit(core, need_core), slot_free(tasks), strict=True
        )
    ]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 5000), st.integers(0, 1000), st.integers(0, 9)),
        min_size=1,
        max_size=16,
    ),
    st.integers(1, 3000),
    st.integers(0, 1000),
    st.integers(1, 20),
)
@pytest.mark.slow
def test_shares_that_fit_counts_shares_taken_one_after_another(
    cards: list[tuple[int, int, int]], need_mib: int, need_core: int, cap: int
) -> None:
    mem, core, tasks = (np.asarray(col, np.int64) for col in zip(*cards, strict=True))
    counted = shares_that_fit(mem, core, tasks, need_mib, need_core, cap)
    for i, (m, c, t) in enumerate(cards):
        k = 0
        while k < cap and share_fits_one(
            m - k * need_mib, c - k * need_core, t - k, need_mib, need_core
        ):
            k += 1
        assert counted[i] == k


_FREE = {
    "dev_mem_free", "dev_core_free", "dev_task_free", "mem_free", "core_free", "task_free",
    "tasks_free", "mem_left", "core_left", "tasks_left", "core", "mem", "tasks", "free",
}  # fmt: skip
_NEED = {"need_mib", "need_core", "NEED_MIB", "NEED_CORE", "_thresholds", "memory_mib"}
_NEED |= {"core_permille"}


def _names(node: ast.AST) -> set[str]:
    found: set[str] = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            found.add(n.id)
        elif isinstance(n, ast.Attribute):
            found.add(n.attr)
    return found


def _hand_made_fits(path: Path) -> list[str]:
    """Order comparisons in ``path`` with free device capacity on one side and a need on the
    other: a second copy of the capacity rule."""
    hits = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Compare):
            continue
        if not any(isinstance(op, ast.Lt | ast.LtE | ast.Gt | ast.GtE) for op in node.ops):
            continue
        sides = [_names(side) for side in (node.left, *node.comparators)]
        if any(s & _FREE for s in sides) and any(s & _NEED for s in sides):
            hits.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    return hits


@pytest.mark.slow
def test_no_module_but_the_predicate_compares_free_capacity_with_a_need() -> None:
    """Filters, the measure, the pressure, the kernels and the state ask ``capacity``; a new
    capacity rule (a task limit, an over-commit factor) then changes one module."""
    own = Path(capacity.__file__).resolve()
    hits = [h for p in sorted(SOURCES.rglob("*.py")) if p != own for h in _hand_made_fits(p)]
    assert hits == []


def test_the_source_check_sees_a_hand_made_comparison(tmp_path: Path) -> None:
    """The check above can fail: the comparisons the filters and kernels used to make are seen."""
    path = tmp_path / "sample.py"
    path.write_text(
        "ok = state.dev_mem_free >= ctx.need_mib\n"
        "ok = core[w] >= t[NEED_CORE][m]\n"
        "ok = free[..., None] >= self._thresholds\n"
        "ok = mem_free[share.slot] < share.memory_mib\n"
        "ok = ctx.need_core > 0\n"
    )
    assert len(_hand_made_fits(path)) == 4


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 10**6), st.integers(1, 10**6), st.integers(0, 8000), st.integers(1, 8000)
        ),
        min_size=1,
        max_size=30,
    ),
    st.integers(1, 8),
    st.integers(0, 81920),
    st.integers(0, 1000),
)
@pytest.mark.slow
def test_binpack_compiled_fraction_is_the_numpy_expression_bit_for_bit(
    nodes: list[tuple[int, int, int, int]], k: int, need_mib: int, need_core: int
) -> None:
    """The compiled loop behind binpack and spread gives the very floats of the array expression
    it replaces (placements depend on exact ties)."""
    from xpupool.engine.scorers.binpack import BINPACK, FRACTION, SPREAD, _device_fraction_after

    mem_free, mem_total, core_free, core_total = (
        np.asarray(col, np.int64) for col in zip(*nodes, strict=True)
    )
    inv_mem, inv_core = 1.0 / mem_total, 1.0 / core_total
    mem_need = (k * need_mib) * inv_mem
    expected = 0.5 * (
        (1.0 - mem_free * inv_mem + mem_need) + (1.0 - (core_free - k * need_core) * inv_core)
    )
    scores = {
        FRACTION: expected,
        BINPACK: np.clip(100.0 * expected, 0.0, 100.0),
        SPREAD: np.clip(100.0 * (1.0 - expected), 0.0, 100.0),
    }
    for mode, want in scores.items():
        out = np.empty(len(nodes))
        _device_fraction_after(
            mem_free, inv_mem, core_free, inv_core, k * need_mib, inv_mem, k * need_core, mode, out
        )
        assert out.tobytes() == want.tobytes()
