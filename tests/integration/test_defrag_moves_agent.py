"""Online defragmentation end to end (issue 54 part 3): a real ``xpupool up --defrag`` and a real
``xpupool agent`` whose fake probe reads two A100s, running real processes. Two half-card jobs
sit one on each card; the second declares a checkpoint signal and traps it. A whole-card job then
fits nowhere: the plane moves the movable share as it preempts (its checkpoint signal, SIGTERM,
requeued), the whole-card job runs on the card it left, and the moved job runs again beside the
other share. Checked in the jobs' events, their cards and what the moved job printed. No timing
is asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from job_commands import JOB_PYTHON, TRAPS
from server_proc import ServerProc, stop_process, until

pytestmark = pytest.mark.slow

FAKE = Path(__file__).parents[1] / "fixtures" / "agent" / "fake-a100x2.yaml"
SHARE = "A100:1 mem=40Gi cores=50% device-policy=spread"  # the two shares land apart
SLEEPS = [JOB_PYTHON, "-c", "import time; print('up', flush=True); time.sleep(120)"]


def cards(view: dict[str, Any]) -> list[str]:
    return [d["uuid"] for a in view["assignments"] for d in a["devices"]]


def test_a_whole_card_job_runs_after_the_plane_moves_a_share_that_checkpoints(
    tmp_path: Path,
) -> None:
    extra = ("--heartbeat", "0.2", "--defrag")
    with ServerProc(tmp_path / "data", extra_args=extra) as srv:
        agent, agent_log = srv.start_agent(tmp_path, "n1", FAKE, "--grace", "5")
        try:
            with srv.tenant_client("team") as team:

                def submit(request: str, command: list[str]) -> int:
                    r = team.post("/v1/jobs", json={"request": request, "command": command})
                    assert r.status_code == 201, r.text
                    return int(r.json()["id"])

                def job(job_id: int) -> dict[str, Any]:
                    return dict(team.get(f"/v1/jobs/{job_id}").json())

                def log(job_id: int) -> str:
                    return team.get(f"/v1/jobs/{job_id}/logs").text

                until(lambda: team.get("/v1/nodes").status_code == 200, "the server", 60)
                fixed = submit(SHARE, SLEEPS)
                until(lambda: job(fixed)["state"] == "running", "the fixed share to run", 90)
                movable = submit(f"{SHARE} checkpoint-signal=USR1", TRAPS)
                until(lambda: "up" in log(movable).split(), "the movable share to run", 90)
                left = cards(job(movable))
                assert left != cards(job(fixed))  # one share on each card

                whole = submit("A100:1", SLEEPS)
                until(lambda: job(whole)["state"] == "running", "the whole-card job to run", 90)
                assert cards(job(whole)) == left  # the card the move freed
                until(
                    lambda: job(movable)["state"] == "running" and job(movable)["attempts"] == 2,
                    "the moved job to run again",
                    90,
                )
                again = job(movable)
                assert cards(again) == cards(job(fixed))  # beside the share that stayed
                assert job(fixed)["attempts"] == 1  # never stopped
                said = [e["reason"] for e in again["events"]]
                moved = (
                    f"moved to defragment: checkpointed, stopped and requeued so that job {whole}"
                )
                assert any(moved in r for r in said), said
                helped = [e["reason"] for e in job(whole)["events"]]
                assert any(f"moving job(s) [{movable}] to defragment" in r for r in helped), helped
                with httpx.Client(base_url=srv.url, headers=srv.headers(), timeout=10) as admin:
                    r = admin.get("/v1/defrag/plan")
                    assert r.status_code == 200, r.text
                    assert r.json() == {"enabled": True, "plans": []}  # nothing waits now
                # its first run saw the checkpoint signal before SIGTERM
                words = until(
                    lambda: "term" in (w := log(movable).split()) and w, "its first run's log", 30
                )
                assert "checkpoint" in words, words
                assert words.index("checkpoint") < words.index("term"), words
        except AssertionError:  # what the plane recorded and the jobs printed, to tell why
            with httpx.Client(base_url=srv.url, headers=srv.headers(), timeout=10) as admin:
                for job_id in (1, 2, 3):
                    events = admin.get(f"/v1/jobs/{job_id}").json().get("events", [])
                    print(job_id, [(e["state"], e["reason"]) for e in events])
                    print(job_id, admin.get(f"/v1/jobs/{job_id}/logs").text[-1500:])
            print(agent_log.read_text()[-3000:])
            raise
        finally:
            stop_process(agent)


def test_the_dry_run_command_prints_the_plan_as_json(tmp_path: Path) -> None:
    """Without --defrag nothing moves; ``xpupool defrag --dry-run -o json`` shows the plan."""
    with ServerProc(tmp_path / "data", extra_args=("--heartbeat", "0.2")) as srv:
        agent, _ = srv.start_agent(tmp_path, "n1", FAKE, "--grace", "1")
        try:
            with srv.tenant_client("team") as team:

                def submit(request: str) -> int:
                    r = team.post("/v1/jobs", json={"request": request, "command": SLEEPS})
                    assert r.status_code == 201, r.text
                    return int(r.json()["id"])

                def job(job_id: int) -> dict[str, Any]:
                    return dict(team.get(f"/v1/jobs/{job_id}").json())

                until(lambda: team.get("/v1/nodes").status_code == 200, "the server", 60)
                fixed = submit(SHARE)
                until(lambda: job(fixed)["state"] == "running", "the fixed share", 90)
                movable = submit(f"{SHARE} checkpoint-signal=USR1")
                until(lambda: job(movable)["state"] == "running", "the movable share", 90)
                whole = submit("A100:1")
                until(lambda: job(whole)["reason"] != "", "the whole-card job to be tried", 60)
                argv = [sys.executable, "-c", "from xpupool.cli import main; main()"]
                argv += ["defrag", "--dry-run", "-o", "json", "--url", srv.url]
                argv += ["--token", srv.admin_token]
                done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
                assert done.returncode == 0, done.stderr
                plan = json.loads(done.stdout)
                assert plan["enabled"] is False
                assert [p["job"] for p in plan["plans"]] == [whole]
                assert [m["job"] for m in plan["plans"][0]["moves"]] == [movable]
                assert job(movable)["state"] == "running" and job(whole)["state"] == "pending"
        finally:
            stop_process(agent)
