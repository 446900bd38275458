"""``import xpupool.cli`` must not pull in the server stack (STYLE.md section 4): a laptop CLI
needs httpx and pydantic, not FastAPI or SQLAlchemy. A fresh interpreter, so that modules other
tests imported do not hide a regression."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.slow
def test_importing_the_cli_pulls_in_neither_fastapi_nor_sqlalchemy() -> None:
    code = (
        "import sys, xpupool.cli, xpupool.client; "
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('fastapi', 'sqlalchemy')); "
        "assert not bad, bad"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
