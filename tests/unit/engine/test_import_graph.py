"""The engine's modules import each other without a circle.

Read from the source with ``ast``, not by importing: a module's imports at module level count,
those under ``if TYPE_CHECKING:`` too (a circle there still knots the modules together and only
works because the type checker is lenient), those inside functions do not (they run later, and
are the usual way to defer an optional dependency).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

import xpupool.engine

ENGINE = Path(xpupool.engine.__file__).resolve().parent
PREFIX = "xpupool.engine"


def _module_name(path: Path) -> str:
    parts = path.relative_to(ENGINE).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join((PREFIX, *parts))


def _top_level(tree: ast.Module) -> Iterator[ast.Import | ast.ImportFrom]:
    """The imports run when the module is imported: all but those in function bodies."""
    todo: list[ast.AST] = [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        todo.extend(ast.iter_child_nodes(node))


def _imports(path: Path, name: str, modules: set[str]) -> set[str]:
    """The engine modules ``path`` (module ``name``) imports when it is imported."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in _top_level(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            for alias in node.names:  # ``from pkg import submodule`` imports the submodule
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in modules else base)
    return found & modules


def engine_graph() -> dict[str, set[str]]:
    paths = {_module_name(p): p for p in sorted(ENGINE.rglob("*.py"))}
    modules = set(paths)
    return {name: _imports(path, name, modules) - {name} for name, path in paths.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def _in_fgd_family(name: str) -> bool:
    local = name.removeprefix(PREFIX + ".")
    return (
        local == "fragmentation"
        or local.startswith(("fragmentation.", "scorers."))
        or local in {"pipeline", "registry"}
    )


def test_the_graph_is_read() -> None:
    """The parser sees the imports it is meant to (else an empty graph would pass)."""
    graph = engine_graph()
    assert f"{PREFIX}.registry" in graph[f"{PREFIX}.pipeline"]
    assert f"{PREFIX}.scorers.fgd" in graph[f"{PREFIX}.registry"]
    assert any(n.startswith(f"{PREFIX}.fragmentation") for n in graph[f"{PREFIX}.scorers.fgd"])


def test_no_circle_between_the_measure_the_pipeline_and_the_scorers() -> None:
    graph = engine_graph()
    family = {
        name: {m for m in imports if _in_fgd_family(m)}
        for name, imports in graph.items()
        if _in_fgd_family(name)
    }
    assert _cycles(family) == []


@pytest.mark.slow
def test_no_circle_in_the_engine() -> None:
    assert _cycles(engine_graph()) == []
