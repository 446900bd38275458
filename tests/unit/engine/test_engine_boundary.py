"""Fronts use the engine through its methods, not by reaching into its pipeline or its state.

Issue 44, item 1: the fronts reached around the engine into ``engine.pipeline`` and
``engine.state`` from a dozen files, so a change inside the engine touched every front. The engine
now has methods for what they did there (node reasons for a request, a shape table or a
fragmentation measure for a workload, the filters a profile turns off, a what-if, a cordon), and
the preemption planner takes the engine; this test keeps the fronts on them, as the capacity test
keeps one capacity predicate. No front reads the pipeline any more, nor the state for node
lookups, device masks, live allocations, sites or model names (the engine's lookups by name);
what is still read is listed below, as a ceiling that only goes down.
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import xpupool

SOURCES = Path(xpupool.__file__).resolve().parent
ENGINE = SOURCES / "engine"

STILL_REACHED: dict[tuple[str, str], int] = {
    # the plane's read-only view of the columns for its dashboards and metrics
    # (``ControlPlane.cluster_state``): the one read left of item 1
    ("server/plane/control.py", "state"): 1,
}
"""(file under src/xpupool, attribute) -> how many reads of an engine's ``pipeline`` or
``state`` it may still make; lower it when a read goes."""


def _is_engine(node: ast.expr) -> bool:
    """``engine``, ``self.engine``, ``plane.engine``...: an expression naming an engine."""
    if isinstance(node, ast.Name):
        return node.id == "engine"
    return isinstance(node, ast.Attribute) and node.attr == "engine"


def reaches(path: Path) -> Counter[str]:
    """How often ``path`` reads ``<engine>.pipeline`` and ``<engine>.state``."""
    found: Counter[str] = Counter()
    for node in ast.walk(ast.parse(path.read_text())):
        if (
            isinstance(node, ast.Attribute)
            and node.attr in ("pipeline", "state")
            and _is_engine(node.value)
        ):
            found[node.attr] += 1
    return found


def test_no_front_reaches_into_the_engine_more_than_it_did() -> None:
    seen: dict[tuple[str, str], int] = {}
    for path in sorted(SOURCES.rglob("*.py")):
        if ENGINE in path.parents:
            continue
        for attr, count in reaches(path).items():
            seen[(str(path.relative_to(SOURCES)), attr)] = count
    over = {k: v for k, v in seen.items() if v > STILL_REACHED.get(k, 0)}
    assert over == {}, "use an Engine method (engine/engine.py) instead"
    gone = {k: v for k, v in STILL_REACHED.items() if seen.get(k, 0) < v}
    assert gone == {}, "fewer reads now: lower STILL_REACHED to what is left"


def test_the_check_sees_a_front_reaching_in(tmp_path: Path) -> None:
    path = tmp_path / "front.py"
    path.write_text(
        "engine.pipeline.node_reasons(ctx)\n"
        "x = self.engine.state.live\n"
        "plane.engine.state.node_index\n"
        "view.state\n"
    )
    assert reaches(path) == Counter({"pipeline": 1, "state": 2})
