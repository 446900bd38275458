"""An HTTP worker (``server/front/main.py``) carries what it needs to take requests and render a
submission's answer, not the plane: neither the engine nor numpy nor the store. A worker that
imported the plane took 1,100 modules, 140 MB and two seconds to start, each time one is
started again."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

PLANE_ONLY = ("numpy", "sqlalchemy", "fastapi", "xpupool.engine", "xpupool.server.plane")


@pytest.mark.slow
def test_a_worker_imports_nothing_of_the_plane() -> None:
    code = (
        "import json, sys\n"
        "import xpupool.server.front.main\n"
        "from xpupool.agent.launch.guard import protect_process\n"
        f"print(json.dumps([m for m in {PLANE_ONLY!r} if m in sys.modules]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert json.loads(out.stdout) == []
