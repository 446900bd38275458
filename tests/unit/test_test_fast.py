"""``make test-fast`` selects no test that starts servers, browsers or clusters (issue 44 part 9).

The fast loop is the Makefile's marker expression; tests/conftest.py gives every test under
tests/integration, tests/browser and tests/e2e/k8s its folder's marker. A collection (no test
runs) of those folders under that expression must come back empty, so nothing slow creeps into
the two-minute loop by a new folder, a renamed marker or a broken hook; a unit test named beside
them must still be selected, so an expression that selects nothing cannot pass either. That
collection imports every integration module (15 s on a busy box), so it is itself `slow` and runs
in make test and CI; the fast loop checks the same rule file by file without importing them.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from markers import folder_marker

ROOT = Path(__file__).parents[2]
SLOW_FOLDERS = ("tests/integration", "tests/browser", "tests/e2e")
A_UNIT_TEST = "tests/unit/test_test_fast.py"


def fast_markers() -> str:
    found = re.search(r"^TEST_FAST_MARKERS := (.+)$", (ROOT / "Makefile").read_text(), re.M)
    assert found is not None, "the Makefile no longer defines TEST_FAST_MARKERS"
    return found.group(1).strip()


def deselected_by(expression: str, markers: set[str]) -> bool:
    """Whether ``expression``, of the form ``not a and not b ...``, deselects a test with
    ``markers``."""
    terms = expression.split(" and ")
    assert all(re.fullmatch(r"not \w+", term) for term in terms), expression
    return any(term.removeprefix("not ") in markers for term in terms)


def test_every_file_of_the_slow_folders_gets_a_marker_the_fast_loop_leaves_out() -> None:
    expression = fast_markers()
    files = [f for folder in SLOW_FOLDERS for f in sorted((ROOT / folder).rglob("test_*.py"))]
    assert len(files) > 50
    for path in files:
        marker = folder_marker(path)
        assert marker is not None, f"{path}: its folder gives it no marker"
        assert deselected_by(expression, {marker}), f"{path}: make test-fast would run it"
    for folder in ("tests/unit", "tests/property"):
        for path in (ROOT / folder).rglob("test_*.py"):
            assert folder_marker(path) is None, path
            assert not deselected_by(expression, set()), expression


@pytest.mark.slow
def test_the_fast_expression_leaves_out_every_server_browser_and_cluster_test(
    tmp_path: Path,
) -> None:
    expression = fast_markers()
    for marker in ("integration", "browser", "k8s", "slow", "hami"):
        assert f"not {marker}" in expression
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-o",
            "addopts=-q",  # one -q: node ids, not per-file counts
            "-p",
            "no:cacheprovider",
            f"--basetemp={tmp_path / 'bt'}",
            "-m",
            expression,
            *SLOW_FOLDERS,
            A_UNIT_TEST,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    selected = [line.split("::")[0] for line in done.stdout.splitlines() if "::" in line]
    strays = sorted({path for path in selected if path.startswith(SLOW_FOLDERS)})
    assert not strays, f"make test-fast would run these: {strays}"
    assert A_UNIT_TEST in selected, done.stdout
