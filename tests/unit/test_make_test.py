"""``make test`` runs every test once: the unit and property tests in two processes, then the
tests that start servers, agents, a browser or a cluster one at a time (they share the host's job
root, cgroups and container engine). Its two marker expressions must together select every test
but HAMi's (``make test-hami``), none twice, whatever other markers a test carries."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

from _pytest.mark.expression import Expression

ROOT = Path(__file__).parents[2]
FOLDER_MARKERS = ("integration", "browser", "k8s")  # tests/markers.py: one per slow folder
OTHER_MARKERS = ("slow", "hami")


def expression(name: str) -> Expression:
    found = re.search(rf"^{name} := (.+)$", (ROOT / "Makefile").read_text(), re.M)
    assert found is not None, f"the Makefile no longer defines {name}"
    return Expression.compile(found.group(1).strip())


def test_the_two_parts_of_make_test_select_every_test_but_hamis_once() -> None:
    parallel = expression("TEST_PARALLEL_MARKERS")
    serial = expression("TEST_SERIAL_MARKERS")
    folders: list[tuple[str, ...]] = [(), *((m,) for m in FOLDER_MARKERS)]
    others = [c for n in range(3) for c in itertools.combinations(OTHER_MARKERS, n)]
    for folder, other in itertools.product(folders, others):
        marks = {*folder, *other}
        picked = [part.evaluate(marks.__contains__) for part in (parallel, serial)]
        if "hami" in marks:
            assert picked == [False, False], marks
        else:
            assert sum(picked) == 1, (marks, picked)
            assert picked[1] == bool(folder), marks  # the folders' tests one at a time


def test_make_test_runs_both_parts_and_fails_if_either_fails() -> None:
    recipe = (ROOT / "Makefile").read_text().split("\ntest: lint\n", 1)[1].split("\n\n", 1)[0]
    assert "-n 2 -m '$(TEST_PARALLEL_MARKERS)' || rc=$$?" in recipe, recipe
    assert "-m '$(TEST_SERIAL_MARKERS)' || rc=$$?" in recipe, recipe
    assert recipe.rstrip().endswith("exit $$rc"), recipe
