"""Outside the ``server/plane/`` package the control plane's live state is reached through its
methods and read-only views only: no module reaches into its dicts (nodes, pending, held jobs,
metrics), its lock (``plane.locked()`` and ``plane.write()`` take it), its private fields or the
engine's columns (``plane.engine.state``). Read from the source with ``ast``, so
that a new call site that reaches in fails here, whatever it is named after."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import xpupool

SRC = Path(xpupool.__file__).resolve().parent
DICTS = frozenset({"nodes", "pending", "held", "jobs", "allocations", "metrics", "lock"})


def _is_plane(node: ast.expr) -> bool:
    """``plane`` or ``<anything>.plane``."""
    return (isinstance(node, ast.Name) and node.id == "plane") or (
        isinstance(node, ast.Attribute) and node.attr == "plane"
    )


def _reaches_in(node: ast.Attribute) -> bool:
    if _is_plane(node.value):
        return node.attr in DICTS or node.attr.startswith("_")
    inner = node.value
    return (
        node.attr == "state"
        and isinstance(inner, ast.Attribute)
        and inner.attr == "engine"
        and _is_plane(inner.value)
    )


@pytest.mark.slow
def test_nothing_outside_the_plane_reaches_into_its_state() -> None:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        if path.is_relative_to(SRC / "server" / "plane"):
            continue
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and _reaches_in(node):
                found.append(f"{path.relative_to(SRC)}:{node.lineno}: .{node.attr}")
    assert found == []


def test_the_check_sees_a_reach_in() -> None:
    """The check itself: each kind of reach is found."""
    reaches = ("plane.nodes.get(n)", "self.plane.held", "plane._cycle", "plane.engine.state")
    for text in (*reaches, "plane.lock", "plane._lock"):
        expr = ast.parse(text, mode="eval").body
        assert any(isinstance(n, ast.Attribute) and _reaches_in(n) for n in ast.walk(expr)), text
