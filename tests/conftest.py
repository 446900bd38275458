"""Make ``tests/factories.py`` importable as ``factories`` from every test folder, and mark each
test by the folder it lives in (tests/markers.py, issue 44 part 9), so that ``make test-fast`` can
leave out everything that starts servers, browsers or clusters without each module saying so."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from markers import folder_marker


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        marker = folder_marker(Path(item.path))
        if marker is not None and item.get_closest_marker(marker) is None:
            item.add_marker(getattr(pytest.mark, marker))
