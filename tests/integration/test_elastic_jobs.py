"""An elastic job on a real ``xpupool up`` with a real agent (fake probe, two cards) running real
processes (issue 54 part 1): a stand-in program (``elastic_standin.py``, no torch) records the
sizes it sees through ``XPUPOOL_REPLICAS``/``XPUPOOL_RANK`` and, at each SIGUSR1, the size file.
It starts at its minimum while another job holds the second card, grows into the card once that
job is cancelled, and shrinks back when a new job needs the room: checked in its events, the
store's allocation rows and what the stand-in printed. No timing is asserted."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import httpx
import pytest
from job_commands import JOB_PYTHON
from server_proc import ServerProc, stop_process, until

pytestmark = pytest.mark.slow

FAKE = Path(__file__).parents[1] / "fixtures" / "agent" / "fake-a100x2.yaml"
STANDIN = [JOB_PYTHON, str(Path(__file__).with_name("elastic_standin.py"))]
SLEEPS = [JOB_PYTHON, "-c", "import time; print('up', flush=True); time.sleep(120)"]


def stored_replicas(data: Path, job_id: int) -> list[int]:
    """The replicas the store holds allocations for (read-only, beside the running server)."""
    with sqlite3.connect(f"file:{data / 'state.db'}?mode=ro", uri=True) as db:
        rows = db.execute("SELECT replica FROM allocations WHERE job_id = ?", (job_id,))
        return sorted(int(r[0]) for r in rows)


def test_an_elastic_job_grows_into_a_freed_card_and_shrinks_for_a_job_needing_it(
    tmp_path: Path,
) -> None:
    with ServerProc(tmp_path / "data", extra_args=("--heartbeat", "0.2")) as srv:
        agent, agent_log = srv.start_agent(tmp_path, "n1", FAKE, "--grace", "1")
        try:
            with srv.tenant_client("team") as team:

                def submit(request: str, command: list[str]) -> int:
                    r = team.post("/v1/jobs", json={"request": request, "command": command})
                    assert r.status_code == 201, r.text
                    return int(r.json()["id"])

                def job(job_id: int) -> dict[str, Any]:
                    return dict(team.get(f"/v1/jobs/{job_id}").json())

                def log(job_id: int, replica: int = 0) -> str:
                    return team.get(f"/v1/jobs/{job_id}/logs", params={"replica": replica}).text

                def seen(job_id: int) -> list[str]:
                    lines = log(job_id).splitlines()
                    return [line for line in lines if line.startswith(("start", "signal"))]

                until(lambda: team.get("/v1/nodes").status_code == 200, "the server", 60)
                blocker = submit("A100:1", SLEEPS)
                until(lambda: job(blocker)["state"] == "running", "the blocker to run", 90)
                elastic = submit("A100:1 replicas=1..2", STANDIN)
                until(lambda: "start size 1 rank 0" in log(elastic), "the elastic job", 90)
                assert len(job(elastic)["assignments"]) == 1  # no idle card: at its minimum

                r = team.post(f"/v1/jobs/{blocker}/cancel")
                assert r.status_code == 200, r.text
                until(lambda: "start size 2 rank 1" in log(elastic, 1), "the grown replica", 90)
                until(lambda: len(seen(elastic)) >= 2, "replica 0 told it grew", 60)
                assert stored_replicas(srv.data, elastic) == [0, 1]

                other = submit("A100:1", SLEEPS)
                until(lambda: job(other)["state"] == "running", "the job needing the card", 90)
                until(lambda: len(seen(elastic)) >= 3, "replica 0 told it shrank", 60)
                assert seen(elastic) == [
                    "start size 1 rank 0",
                    "signal size 2 rank 0 members 0,1",
                    "signal size 1 rank 0 members 0",
                ]
                got = job(elastic)
                assert got["state"] == "running" and len(got["assignments"]) == 1
                assert stored_replicas(srv.data, elastic) == [0]
                reasons = [e["reason"] for e in got["events"]]
                grew = "grew to 2 of 2 replicas into idle capacity (replica 1 on n1)"
                assert grew in reasons, reasons
                assert any(r.startswith("shrank to 1 replicas (at least 1)") for r in reasons)
        except AssertionError:  # what the plane recorded and the jobs printed, to tell why
            with httpx.Client(base_url=srv.url, headers=srv.headers(), timeout=10) as admin:
                for job_id in (1, 2, 3):
                    events = admin.get(f"/v1/jobs/{job_id}").json().get("events", [])
                    print(job_id, [(e["state"], e["reason"]) for e in events])
                    for r in (0, 1):
                        logs = admin.get(f"/v1/jobs/{job_id}/logs", params={"replica": r})
                        print(job_id, r, logs.text[-1500:])
            print(agent_log.read_text()[-3000:])
            raise
        finally:
            stop_process(agent)
