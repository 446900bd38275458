"""The package's modules import downwards only, floor by floor, and without a circle.

The floors (STYLE.md, issue 44 part 6): model < catalog < engine < sim, server, agent < k8s,
client < cli. A module may import its own top-level package and the floors below it, never a
sibling on its own floor (the simulator does not import the server, nor the server the agent) nor
a floor above. Inside the engine, a test keeps the measure, the pipeline and the scorers apart.

Read from the source with ``ast``, not by importing: a module's imports at module level count,
those under ``if TYPE_CHECKING:`` too (a circle there still knots the modules together and only
works because the type checker is lenient), those inside functions do not (they run later, and
are the usual way to defer an optional dependency).
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

import pytest

import xpupool

PACKAGE = Path(xpupool.__file__).resolve().parent
ENGINE = PACKAGE / "engine"
PREFIX = "xpupool.engine"


def _module_name(path: Path, root: Path = ENGINE, prefix: str = PREFIX) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join((prefix, *parts))


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


def _graph(root: Path, prefix: str) -> dict[str, set[str]]:
    paths = {_module_name(p, root, prefix): p for p in sorted(root.rglob("*.py"))}
    modules = set(paths)
    return {name: _imports(path, name, modules) - {name} for name, path in paths.items()}


def engine_graph() -> dict[str, set[str]]:
    return _graph(ENGINE, PREFIX)


@functools.cache
def package_graph() -> dict[str, set[str]]:
    """Every module of ``xpupool`` and the modules of ``xpupool`` it imports when imported (read
    once per test run: several tests ask, none changes it)."""
    return _graph(PACKAGE, "xpupool")


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


FLOORS: dict[str, int] = {
    "model": 0,
    "log_setup": 0,  # logging options; imports nothing of the package
    "disk_reserve": 0,  # the disk headroom rule; imports nothing of the package
    "log_rotation": 0,  # a log keeps its last bytes (agent, server, client); imports nothing
    "catalog": 1,
    "engine": 2,
    "probes": 2,  # vendor tools read into devices: model and catalog only, beside the engine
    "sim": 3,
    "server": 3,
    "agent": 3,
    "demo": 3,  # ``xpupool demo``: the engine over a fake cluster file
    "start_options": 3,  # --catalog, --profile, --policy, read alike by every front's commands
    "k8s": 4,
    "client": 4,
    "cli": 5,
    "cli_up": 5,  # ``xpupool up``, imported by cli.py only when that command runs
}
"""Top-level package or module of ``xpupool`` -> its floor; a new one must be given a floor."""

SHARED: dict[str, set[str]] = {
    # The agent protocol is the one server module the pool agent may import: the wire both sides
    # speak (issue 44 parts 2 and 6), importable with pydantic and ``xpupool.model`` only.
    "xpupool.server.schemas.agent_protocol": {"agent"},
}
"""Module -> the sibling floors that may import it although it sits on their floor."""

HOSTS: dict[str, set[str]] = {
    # The embedded plane's in-process agent is the server hosting an agent (issue 44 part 6):
    # the one server module that may import the agent, which imports nothing of the server but
    # its protocol.
    "xpupool.server.inprocess_agent": {"agent"},
    # ``xpupool up`` wires the plane and that agent together (its launch settings' type).
    "xpupool.server.up": {"agent"},
}
"""Module -> the sibling floors it may import although they sit on its floor."""

KNOWN_LAYER_SLIPS: set[tuple[str, str]] = set()
"""(importer, imported) pairs that break the floors today and are being removed (none left)."""

KNOWN_CYCLES: list[list[str]] = []
"""Circles of modules that remain today, each being removed; any other circle fails."""


def _top(module: str) -> str:
    return module.split(".")[1]


def layer_slips(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """Every import of a sibling on the same floor or of a higher floor."""
    slips: set[tuple[str, str]] = set()
    for name, imports in graph.items():
        if name == "xpupool":
            continue
        own = _top(name)
        for imported in imports:
            other = _top(imported)
            if other == own or FLOORS[other] < FLOORS[own]:
                continue
            if own in SHARED.get(imported, set()) or other in HOSTS.get(name, set()):
                continue
            slips.add((name, imported))
    return slips


def test_every_top_level_module_has_a_floor() -> None:
    tops = {_top(name) for name in package_graph() if name != "xpupool"}
    assert tops - {"data"} <= set(FLOORS), sorted(tops - set(FLOORS))


def test_the_package_graph_is_read() -> None:
    graph = package_graph()
    assert "xpupool.engine.cycle" in graph["xpupool.sim.queue_config"]
    assert "xpupool.k8s.informers.cluster_view" in graph["xpupool.k8s.extender.verbs"]
    assert "xpupool.start_options" in graph["xpupool.cli"]
    slips = layer_slips({"xpupool.sim.runner": {"xpupool.server.plane", "xpupool.engine"}})
    assert slips == {("xpupool.sim.runner", "xpupool.server.plane")}


def test_every_module_imports_its_own_floor_and_below() -> None:
    assert sorted(layer_slips(package_graph()) - KNOWN_LAYER_SLIPS) == []


def test_the_known_layer_slips_are_still_there() -> None:
    """A slip removed must leave the list too, so that it cannot come back unseen."""
    assert sorted(KNOWN_LAYER_SLIPS - layer_slips(package_graph())) == []


def test_no_circle_in_the_package() -> None:
    assert _cycles(package_graph()) == KNOWN_CYCLES


K8S_FLOORS: dict[str, int] = {
    "codec": 0,
    "informers": 1,
    "node_agent": 1,
    "extender": 2,
    "site": 2,
    "cli": 3,
}
"""The Kubernetes front's own floors (``k8s/__init__.py``): the formats, then what reads the
cluster (informers) or writes a node (node agent), then the extender and the plane's site, then the
commands."""


def test_the_kubernetes_front_imports_downwards() -> None:
    graph = package_graph()
    slips = []
    for name, imports in graph.items():
        parts = name.split(".")
        if parts[:2] != ["xpupool", "k8s"] or len(parts) < 3:
            continue
        for imported in imports:
            other = imported.split(".")
            if other[:2] != ["xpupool", "k8s"] or len(other) < 3 or other[2] == parts[2]:
                continue
            if K8S_FLOORS[other[2]] >= K8S_FLOORS[parts[2]]:
                slips.append((name, imported))
    assert sorted(slips) == []
    assert set(K8S_FLOORS) == {n.split(".")[2] for n in graph if n.startswith("xpupool.k8s.")}
