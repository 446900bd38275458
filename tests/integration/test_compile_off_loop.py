"""A first start compiles the engine's loops (seconds of CPU, tens on a loaded machine): the API
answers meanwhile, a job submitted then included.

The scheduling pass runs on the event loop that serves the API; a placement that needs a loop still
compiling must wait for it off that loop, or every request waits with it (issue 42: `GET
/v1/jobs/1` timed out for about 20 s on a first start).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import httpx
import pytest
from tests.integration.server_proc import CLUSTER_MIXED, ServerProc, until

pytestmark = pytest.mark.slow

ANSWER_S = 5.0
"""What one request may take while the loops compile (a request waits for no compile; under
0.2 s at load 9 here): the frozen event loop took tens of seconds."""
WATCH_S = 30.0
"""How long the answers are watched while the job waits (a cold compile takes longer on a loaded
machine; the job is placed sooner on an idle one)."""


def test_api_answers_while_the_first_placement_waits_for_a_compile(tmp_path: Path) -> None:
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba")}  # empty: every loop compiles
    with ServerProc(tmp_path / "data", cluster=CLUSTER_MIXED, env=env) as srv:
        with srv.tenant_client("team") as team:
            r = team.post("/v1/jobs", json={"request": "any", "command": ["true"]})
            assert r.status_code == 201, r.text
            job = r.json()["id"]
            states: list[str] = []
            watched_until = time.monotonic() + WATCH_S

            def placed_or_watched() -> bool:
                health = httpx.get(f"{srv.url}/healthz", timeout=ANSWER_S)
                assert health.status_code == 200, health.text
                got = team.get(f"/v1/jobs/{job}", timeout=ANSWER_S)
                assert got.status_code == 200, got.text
                states.append(got.json()["state"])
                return states[-1] != "pending" or time.monotonic() > watched_until

            until(placed_or_watched, "the first job placed", timeout_s=WATCH_S + 60)
        assert states[0] == "pending", "placed before the first answer: nothing was compiling"
        assert len(states) >= 2
