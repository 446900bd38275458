"""Outside the ``server/plane/`` package nobody takes the plane's lock: services, pages and
metrics call named plane operations (``server/plane/reads.py``, ``nodes.py``, ``control.py``), each
of which says what it reads as one state and what it changes as one step (issue 44, item 2: the
books reached only through methods, the lock private to the package). Read from the source with
``ast``, as tests/unit/engine/test_engine_boundary.py keeps the fronts off the engine's insides.

``plane.locked()`` and ``plane.write()`` still taken outside the package are listed below, as a
ceiling per file that only goes down."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import xpupool

SOURCES = Path(xpupool.__file__).resolve().parent
BENCH = SOURCES.parents[1] / "bench"
PLANE = SOURCES / "server" / "plane"

STILL_TAKEN: dict[tuple[str, str], int] = {
    # a token's first use binds it around fleet.register and agents.heartbeat, as one step
    ("server/services/node_identity.py", "locked"): 2,
    ("server/services/node_identity.py", "write"): 1,
}
"""(file under src/xpupool, or bench/..., and ``locked`` or ``write``) -> how many times it may
still take the plane's lock; lower it when one goes."""


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


def test_nothing_outside_the_plane_takes_its_lock_more_than_it_did() -> None:
    seen: dict[tuple[str, str], int] = {}
    for path in sorted([*SOURCES.rglob("*.py"), *BENCH.rglob("*.py")]):
        if path.is_relative_to(PLANE):
            continue
        for method, count in takes(path.read_text()).items():
            seen[(_name(path), method)] = count
    over = {k: v for k, v in seen.items() if v > STILL_TAKEN.get(k, 0)}
    assert over == {}, "call a named plane operation (server/plane/) instead"
    gone = {k: v for k, v in STILL_TAKEN.items() if seen.get(k, 0) < v}
    assert gone == {}, "fewer now: lower STILL_TAKEN to what is left"


def test_the_check_sees_the_lock_taken() -> None:
    source = (
        "with plane.locked():\n    pass\n"
        "with self.plane.write() as conn:\n    pass\n"
        "with p.locked(), p.db.connect() as conn:\n    pass\n"
        "with self.write() as conn:\n    pass\n"  # an audit log's own writer: not the plane
    )
    assert takes(source) == Counter({"locked": 2, "write": 1})
