"""Outside the ``server/plane/`` package nobody takes the plane's lock: services, pages, metrics,
the scheduling loop and the Kubernetes site call named plane operations (``server/plane/reads.py``,
``nodes.py``, ``control.py``, ``agent_reports.py``, ``scheduling_pass.py``, ``submissions.py``,
``stored_job_settling.py``, ``site_runs.py``, ``token_binding.py``...), each of which says what it
reads as one state and what it changes as one step (issue 44, item 2: the books reached only
through methods, the lock private to the package). Read from the source with ``ast``, as
tests/unit/engine/test_engine_boundary.py keeps the fronts off the engine's insides: no
``plane.locked()`` nor ``plane.write()`` outside the package, in ``src/xpupool`` or ``bench/``."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import xpupool

SOURCES = Path(xpupool.__file__).resolve().parent
BENCH = SOURCES.parents[1] / "bench"
PLANE = SOURCES / "server" / "plane"


def _is_plane(node: ast.expr) -> bool:
    """``plane``, ``p`` (a plane in a short function) or ``<anything>.plane``."""
    return (isinstance(node, ast.Name) and node.id in ("plane", "p")) or (
        isinstance(node, ast.Attribute) and node.attr == "plane"
    )


def takes(source: str) -> Counter[str]:
    """How often ``source`` calls ``<plane>.locked()`` and ``<plane>.write()``."""
    found: Counter[str] = Counter()
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("locked", "write")
            and _is_plane(node.func.value)
        ):
            found[node.func.attr] += 1
    return found


def _name(path: Path) -> str:
    if path.is_relative_to(SOURCES):
        return str(path.relative_to(SOURCES))
    return str(path.relative_to(BENCH.parent))


def test_nothing_outside_the_plane_takes_its_lock() -> None:
    seen: dict[tuple[str, str], int] = {}
    for path in sorted([*SOURCES.rglob("*.py"), *BENCH.rglob("*.py")]):
        if path.is_relative_to(PLANE):
            continue
        for method, count in takes(path.read_text()).items():
            seen[(_name(path), method)] = count
    assert seen == {}, "call a named plane operation (server/plane/) instead"


def test_the_check_sees_the_lock_taken() -> None:
    source = (
        "with plane.locked():\n    pass\n"
        "with self.plane.write() as conn:\n    pass\n"
        "with p.locked(), p.db.connect() as conn:\n    pass\n"
        "with self.write() as conn:\n    pass\n"  # an audit log's own writer: not the plane
    )
    assert takes(source) == Counter({"locked": 2, "write": 1})
