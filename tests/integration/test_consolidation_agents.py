"""Consolidation in quiet periods end to end (issue 54 part 3): a real ``xpupool up --defrag
--consolidate`` (quiet at once, a search every 2s) and two real ``xpupool agent``s whose fake
probes read four A100s each, running real processes. A 4-card job runs and ends (the shape the
plane learns to expect); four jobs pinned to n1's cards fill it, a one-card job that traps its
checkpoint signal runs on n2, and one pinned job is cancelled: n1 has a card free and n2 three,
so no 4-card job fits. With nothing waiting, the plane moves the one-card job onto n1 (its
checkpoint signal, SIGTERM, requeued, run again on the card kept for it) and n2 is whole: the next
4-card job runs there. Checked in the jobs' events, their cards and what the moved job printed.
No timing is asserted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from job_commands import JOB_PYTHON, TRAPS
from server_proc import ServerProc, stop_process, until

pytestmark = pytest.mark.slow

SLEEPS = [JOB_PYTHON, "-c", "import time; print('up', flush=True); time.sleep(120)"]
ENDS = [JOB_PYTHON, "-c", "print('done')"]


def fake(tmp: Path, node: str) -> Path:
    """Four fake A100s named ``GPU-<node>-0`` to ``-3`` (probes/fake.py format)."""
    path = tmp / f"{node}.yaml"
    path.write_text(
        "devices:\n"
        "  - vendor: nvidia\n"
        "    model: NVIDIA A100-SXM4-80GB\n"
        "    count: 4\n"
        "    memory: 80Gi\n"
        "    driver: 550.54.15\n"
        '    runtimes: {cuda: "12.4"}\n'
        f"    uuid_prefix: GPU-{node}\n"
    )
    return path


def cards(view: dict[str, Any]) -> list[str]:
    return [d["uuid"] for a in view["assignments"] for d in a["devices"]]


def test_a_quiet_plane_moves_a_job_to_free_a_node_for_the_shape_it_has_seen(
    tmp_path: Path,
) -> None:
    extra = ("--heartbeat", "0.2", "--defrag", "--consolidate")
    extra += ("--consolidate-quiet", "0s", "--consolidate-every", "2s")
    agents = []
    with ServerProc(tmp_path / "data", extra_args=extra) as srv:
        try:
            for node in ("n1", "n2"):
                (tmp_path / node).mkdir()
                agents.append(srv.start_agent(tmp_path / node, node, fake(tmp_path, node)))
            with srv.tenant_client("team") as team:

                def submit(request: str, command: list[str]) -> int:
                    r = team.post("/v1/jobs", json={"request": request, "command": command})
                    assert r.status_code == 201, r.text
                    return int(r.json()["id"])

                def job(job_id: int) -> dict[str, Any]:
                    return dict(team.get(f"/v1/jobs/{job_id}").json())

                def log(job_id: int) -> str:
                    return team.get(f"/v1/jobs/{job_id}/logs").text

                def nodes() -> int:
                    return len(team.get("/v1/nodes").json())

                until(
                    lambda: team.get("/v1/nodes").status_code == 200 and nodes() == 2,
                    "both agents",
                    90,
                )
                large = submit("A100:4", ENDS)  # the shape the plane learns to expect
                until(lambda: job(large)["state"] == "succeeded", "the 4-card job to end", 90)
                pinned = [submit(f"A100:1 uuid=GPU-n1-{i}", SLEEPS) for i in range(4)]
                for p in pinned:
                    until(lambda p=p: job(p)["state"] == "running", "the pinned jobs to run", 90)
                movable = submit("A100:1 checkpoint-signal=USR1", TRAPS)
                until(lambda: "up" in log(movable).split(), "the movable job to run", 90)
                assert cards(job(movable))[0].startswith("GPU-n2-")  # n1 was full
                assert team.post(f"/v1/jobs/{pinned[3]}/cancel").status_code == 200

                until(
                    lambda: job(movable)["state"] == "running" and job(movable)["attempts"] == 2,
                    "the moved job to run again",
                    90,
                )
                assert cards(job(movable)) == ["GPU-n1-3"]  # the card kept for it
                said = [e["reason"] for e in job(movable)["events"]]
                freed = "consolidating: freeing node n2 for 4-card jobs"
                assert any(freed in r for r in said), said
                big = submit("A100:4", SLEEPS)
                until(lambda: job(big)["state"] == "running", "the next 4-card job to run", 90)
                assert {c.rsplit("-", 1)[0] for c in cards(job(big))} == {"GPU-n2"}
                words = until(
                    lambda: "term" in (w := log(movable).split()) and w, "its first run's log", 30
                )
                assert "checkpoint" in words and words.index("checkpoint") < words.index("term")
        except AssertionError:  # what the plane recorded, to tell why
            with httpx.Client(base_url=srv.url, headers=srv.headers(), timeout=10) as admin:
                for job_id in range(1, 9):
                    events = admin.get(f"/v1/jobs/{job_id}").json().get("events", [])
                    print(job_id, [(e["state"], e["reason"]) for e in events])
            for _, agent_log in agents:
                print(agent_log.read_text()[-2000:])
            raise
        finally:
            for agent, _ in agents:
                stop_process(agent)
