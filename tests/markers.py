"""The marker each test folder gives its tests (issue 44 part 9): tests/conftest.py applies it at
collection, and ``make test-fast`` deselects these markers (TEST_FAST_MARKERS in the Makefile)."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).parent

# folder under tests/ -> the marker every test in it carries
FOLDER_MARKERS = {
    ("integration",): "integration",
    ("browser",): "browser",
    ("e2e", "k8s"): "k8s",
}


def folder_marker(path: Path) -> str | None:
    """The marker a test file's folder gives it, or None (unit/, property/)."""
    try:
        parts = path.resolve().relative_to(TESTS.resolve()).parts
    except ValueError:
        return None
    for prefix, marker in FOLDER_MARKERS.items():
        if parts[: len(prefix)] == prefix:
            return marker
    return None
