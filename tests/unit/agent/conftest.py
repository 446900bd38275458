"""Fixtures of the agent's unit tests."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest
from agent_work import HOLD


@pytest.fixture
def holder() -> Iterator[subprocess.Popen[str]]:
    """A real process that holds /dev/full open (no test runner holds it)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, "/dev/full"], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline() == "go\n"
    yield proc
    proc.kill()
    proc.wait()
