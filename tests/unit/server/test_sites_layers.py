"""``server/`` defines the site protocol and ``k8s/`` implements it (issue 44, part 5): the plane
never imports ``k8s/``, not even for types or inside a function, so that ``xpupool up`` hands a
Kubernetes site to the plane as it hands the agent pool (server/sites/, docs/sites.md)."""

from __future__ import annotations

import ast
from pathlib import Path

import xpupool.server

SERVER = Path(xpupool.server.__file__).parent


def _imports(path: Path) -> list[str]:
    """Every module ``path`` imports, wherever the import statement is."""
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.extend(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
            names.extend(f"{node.module}.{a.name}" for a in node.names)
    return names


def test_the_server_never_imports_k8s() -> None:
    found = [
        f"{path.relative_to(SERVER)}: {name}"
        for path in sorted(SERVER.rglob("*.py"))
        for name in _imports(path)
        if name == "xpupool.k8s" or name.startswith("xpupool.k8s.")
    ]
    assert found == []


def test_the_check_sees_an_import_of_k8s(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from xpupool.k8s import extender\n")
    assert "xpupool.k8s" in _imports(module)
