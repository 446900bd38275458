"""The README and docs/*.md say what the code is (issue 42 part 4, "small things a new user
noticed"): every relative link and anchor resolves, the README's accelerator count is the
catalog's, its layout names every package and test folder, and every ``xpupool GROUP SUB`` the
docs show is a command the CLI has. Each was wrong once: a link to a README section that had
moved, "44 accelerator models" beside a catalog of 45, no ``k8s/`` in the layout, and
``xpupool tenant update --weight`` where the command is ``tenant set``.
"""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest

from xpupool.cli import main

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
README = (ROOT / "README.md").read_text()
# how placement works, and the code's layout
INTERNALS = (ROOT / "docs" / "internals.md").read_text()

_LINK = re.compile(r"\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
_COMMAND = re.compile(r"\bxpupool ([a-z][a-z0-9-]*) ([a-z][a-z0-9-]*)")


def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = _FENCE.sub("", path.read_text())
    return {_anchor(m) for m in re.findall(r"^#{1,6} (.+)$", text, re.M)}


def _links(path: Path) -> list[str]:
    text = _FENCE.sub("", path.read_text())
    return [t for t in _LINK.findall(text) if not re.match(r"[a-z]+:", t)]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(doc: Path) -> None:
    broken = []
    for target in _links(doc):
        file, _, anchor = target.partition("#")
        path = (doc.parent / file).resolve() if file else doc
        if not path.exists():
            broken.append(f"{target}: no such file")
        elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
            broken.append(f"{target}: no heading with that anchor")
    assert not broken, f"{doc.relative_to(ROOT)}:\n" + "\n".join(broken)


def test_no_doc_names_a_readme_section_that_is_not_there() -> None:
    """docs/placement-policy.md named a README section ("Reproducing the FGD paper") that had
    moved to docs/benchmarks.md, in plain text: the link check above cannot see that."""
    sections = set(re.findall(r"^## (.+)$", README, re.M))
    for doc in DOCS:
        for name in re.findall(r'README, "([^"]+)"', doc.read_text()):
            assert name in sections, f"{doc.name}: the README has no section {name!r}"


def test_the_internals_count_the_catalogs_accelerator_models() -> None:
    from xpupool.catalog import load_accelerators

    said = re.search(r"lists (\d+) accelerator models", INTERNALS)
    assert said is not None, "docs/internals.md no longer says how many accelerator models"
    assert int(said.group(1)) == len(load_accelerators().models)


def test_the_layout_names_every_package_and_test_folder() -> None:
    layout = INTERNALS.split("## Layout", 1)[1]
    packages = [
        p.name for p in (ROOT / "src" / "xpupool").iterdir() if (p / "__init__.py").exists()
    ]
    for name in packages:
        assert re.search(rf"^\s+{name}/", layout, re.M), f"src/xpupool/{name}/ not in the layout"
    tests = layout.split("tests/", 1)[1].split("docs/", 1)[0]
    for path in (ROOT / "tests").iterdir():
        if path.is_dir() and not path.name.startswith(("_", ".")) and path.name != "fixtures":
            assert f"{path.name}/" in tests, f"tests/{path.name}/ not in the layout"
    for name in re.findall(r"([a-z0-9_/]+)/[,)\s]", tests):
        assert (ROOT / "tests" / name).is_dir(), (
            f"the layout names tests/{name}/, which is not there"
        )


def test_every_command_the_docs_show_exists() -> None:
    missing = []
    ctx = click.Context(main)
    for doc in DOCS:
        for group, sub in _COMMAND.findall(doc.read_text()):
            # get_command, not .commands: most commands are imported when asked for (cli.py)
            command = main.get_command(ctx, group) if isinstance(main, click.Group) else None
            if isinstance(command, click.Group) and sub not in command.commands:
                missing.append(f"{doc.name}: xpupool {group} {sub}")
    assert not missing, "\n".join(missing)


def test_the_docs_index_lists_every_doc_once() -> None:
    """docs/index.md is where a reader finds a page: one that is not listed there is not found, and
    one listed twice is listed in the wrong section once. Raw results count as one entry, their
    folder."""
    index = ROOT / "docs" / "index.md"
    listed = [target.partition("#")[0] for target in _links(index)]
    docs = ROOT / "docs"
    pages = {p.relative_to(docs).as_posix() for p in docs.rglob("*.md")} - {"index.md"}
    expected = pages | {"results/"}
    inside = [t for t in listed if not t.startswith("../")]
    assert sorted(set(inside)) == sorted(expected), "docs/index.md and docs/ disagree"
    assert len(inside) == len(set(inside)), "docs/index.md lists a doc twice"
    assert "docs/index.md" in README, "the README does not link the docs index"


def test_no_raw_result_file_sits_at_the_top_of_docs() -> None:
    """Results the benchmarks write (JSON, JSON lines, CSV, text) live under docs/results/, where
    bench/fingerprint.py, bench/policy_table.py and bench/heldout.py read and write them."""
    loose = [
        p.name for p in (ROOT / "docs").iterdir() if p.suffix in {".json", ".jsonl", ".csv", ".txt"}
    ]
    assert not loose, f"move these under docs/results/: {loose}"
