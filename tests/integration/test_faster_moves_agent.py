"""Moves to faster cards end to end (issue 55): a real ``xpupool up --move-faster`` and a real
``xpupool agent`` whose fake probe reads an A100 and a T4, running real processes. A job declaring
``speed=A100:1.0,T4:0.3`` and a checkpoint signal (which it traps) starts on the T4 while the A100
is busy; the A100's job is cancelled. The plane moves the job as it preempts (its checkpoint
signal, SIGTERM, requeued) and it runs again on the A100. Checked in its events, its cards and what
it printed. No timing is asserted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from job_commands import JOB_PYTHON, TRAPS
from server_proc import ServerProc, stop_process, until

pytestmark = pytest.mark.slow

FAKE = Path(__file__).parents[1] / "fixtures" / "agent" / "fake-a100-t4.yaml"
SLEEPS = [JOB_PYTHON, "-c", "import time; print('up', flush=True); time.sleep(120)"]


def cards(view: dict[str, Any]) -> list[str]:
    return [d["uuid"] for a in view["assignments"] for d in a["devices"]]


def test_a_job_on_the_t4_moves_to_the_a100_once_it_frees(tmp_path: Path) -> None:
    extra = ("--heartbeat", "0.2", "--move-faster")
    with ServerProc(tmp_path / "data", extra_args=extra) as srv:
        agent, agent_log = srv.start_agent(tmp_path, "n1", FAKE, "--grace", "5")
        try:
            with srv.tenant_client("team") as team:

                def submit(request: str, command: list[str], **more: Any) -> int:
                    body = {"request": request, "command": command, **more}
                    r = team.post("/v1/jobs", json=body)
                    assert r.status_code == 201, r.text
                    return int(r.json()["id"])

                def job(job_id: int) -> dict[str, Any]:
                    return dict(team.get(f"/v1/jobs/{job_id}").json())

                def log(job_id: int) -> str:
                    return team.get(f"/v1/jobs/{job_id}/logs").text

                until(lambda: team.get("/v1/nodes").status_code == 200, "the server", 60)
                busy = submit("A100:1", SLEEPS)
                until(lambda: job(busy)["state"] == "running", "the A100's job to run", 90)
                spec = "any speed=A100:1.0,T4:0.3 checkpoint-signal=USR1"
                mover = submit(spec, TRAPS, max_runtime_s=36000)
                until(lambda: "up" in log(mover).split(), "the job on the T4 to run", 90)
                assert cards(job(mover)) == ["GPU-fake-t4-0"]
                r = team.post(f"/v1/jobs/{busy}/cancel")
                assert r.status_code < 300, r.text
                until(
                    lambda: job(mover)["state"] == "running" and job(mover)["attempts"] == 2,
                    "the moved job to run again",
                    120,
                )
                again = job(mover)
                assert cards(again) == ["GPU-fake-a100-0"]
                said = [e["reason"] for e in again["events"]]
                assert any("A100 1x against T4 0.3x" in r for r in said), said
                words = until(
                    lambda: "term" in (w := log(mover).split()) and w, "its first run's log", 30
                )
                assert "checkpoint" in words, words
                assert words.index("checkpoint") < words.index("term"), words
        except AssertionError:  # what the plane recorded and the jobs printed, to tell why
            with httpx.Client(base_url=srv.url, headers=srv.headers(), timeout=10) as admin:
                for job_id in (1, 2):
                    events = admin.get(f"/v1/jobs/{job_id}").json().get("events", [])
                    print(job_id, [(e["state"], e["reason"]) for e in events])
                    print(job_id, admin.get(f"/v1/jobs/{job_id}/logs").text[-1500:])
            print(agent_log.read_text()[-3000:])
            raise
        finally:
            stop_process(agent)
