"""An HTTP worker (``server/front/main.py``) carries what it needs to take requests, read a
submission with FastAPI and render its answer, not the plane: neither the engine nor numpy nor
the store, which made a worker many times slower to start, each time one is started again."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

PLANE_ONLY = (
    "numpy",
    "numba",
    "sqlalchemy",
    "xpupool.engine",
    "xpupool.server.plane",
    "xpupool.server.services",
    "xpupool.server.routers",
)


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
