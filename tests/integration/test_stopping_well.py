"""A job's grace and checkpoint signal against a real ``xpupool up`` whose in-process agent runs
real processes (issue 54 part 2): cancelled, a process that traps both signals sees the checkpoint
signal first, then SIGTERM, runs on through its grace and is killed. No timing is asserted: the
order of what it saw, and how many 0.1 s ticks it printed after SIGTERM (never more than the
time allows)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from job_commands import JOB_PYTHON
from server_proc import ServerProc, until

pytestmark = pytest.mark.slow

TRAPS = [
    JOB_PYTHON,
    "-c",
    "import signal, time\n"
    "say = lambda word: print(word, flush=True)\n"
    "signal.signal(signal.SIGUSR1, lambda *_: say('usr1'))\n"
    "signal.signal(signal.SIGTERM, lambda *_: say('term'))\n"
    "say('up')\n"
    "while True:\n"
    "    say('tick'); time.sleep(0.1)\n",
]


@pytest.fixture
def srv(tmp_path: Path) -> Iterator[ServerProc]:
    with ServerProc(tmp_path / "data", agent=True, extra_args=("--heartbeat", "0.2")) as server:
        r = httpx.post(f"{server.url}/v1/tenants", json={"name": "team"}, headers=server.headers())
        r.raise_for_status()
        yield server


def _job(srv: ServerProc, job_id: int) -> dict[str, Any]:
    r = httpx.get(f"{srv.url}/v1/jobs/{job_id}", headers=srv.headers(), timeout=5)
    return dict(r.json())


def _log(srv: ServerProc, job_id: int) -> str:
    return httpx.get(f"{srv.url}/v1/jobs/{job_id}/logs", headers=srv.headers(), timeout=5).text


def test_cancel_sends_the_checkpoint_signal_then_term_and_waits_out_the_grace(
    srv: ServerProc,
) -> None:
    body = {"tenant": "team", "command": TRAPS, "request": "grace=3s checkpoint-signal=USR1"}
    r = httpx.post(f"{srv.url}/v1/jobs", json=body, headers=srv.headers(), timeout=10)
    assert r.status_code == 201, r.text
    job_id = int(r.json()["id"])
    assert r.json()["request"]["grace"] == "3s"
    until(lambda: "up" in _log(srv, job_id), "the job to start", 60)
    r = httpx.post(f"{srv.url}/v1/jobs/{job_id}/cancel", headers=srv.headers(), timeout=10)
    assert r.status_code == 200, r.text
    until(lambda: _job(srv, job_id)["state"] == "cancelled", "the job to be cancelled", 60)
    lines = until(lambda: "term" in (t := _log(srv, job_id)) and t.split(), "its log", 30)
    assert lines.index("usr1") < lines.index("term")
    # it trapped SIGTERM and ran on through its grace, then was killed: at one tick per 0.1 s at
    # most, 60 ticks is 6 s, more than its 3 s and less than the in-process agent's own 10 s
    after_term = lines[lines.index("term") + 1 :].count("tick")
    assert 3 <= after_term <= 60, after_term
