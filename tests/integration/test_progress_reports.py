"""Measured speeds end to end (issue 55): jobs run by a real ``xpupool agent`` write their rate
to ``$XPUPOOL_PROGRESS_FILE``; the agent reads the file at its heartbeat and the plane stores the
figure per (kind, card model). After the plane restarts, a job of the same kind that declares no
speeds is given the measured ones, and its admission event says so."""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
from pathlib import Path

import httpx
import pytest
from job_commands import JOB_PYTHON
from server_proc import ServerProc, stop_process, until
from test_agent_e2e import CLI

pytestmark = pytest.mark.slow

FAKE = Path(__file__).parents[1] / "fixtures" / "agent" / "fake-a100x2-910b3.yaml"
SLEEPS = [JOB_PYTHON, "-c", "import time; time.sleep(120)"]  # reports nothing of itself


def writes(rate: str) -> list[str]:
    """A job that reports ``rate`` through its progress file, then runs on."""
    script = (
        "import os, time\n"
        f"open(os.environ['XPUPOOL_PROGRESS_FILE'], 'w').write('{rate} steps/s')\n"
        "print('wrote', flush=True); time.sleep(120)\n"
    )
    return [JOB_PYTHON, "-c", script]


def figures(data: Path) -> dict[str, tuple[float, int]]:
    """The stored figures, read from the plane's SQLite file as any reader may (WAL)."""
    with sqlite3.connect(data / "state.db") as db:
        rows = db.execute("SELECT model, rate, runs FROM throughput_measured WHERE kind = 'toy'")
        return {model: (rate, runs) for model, rate, runs in rows}


def test_an_agent_reads_the_progress_file_and_the_figures_outlive_a_restart(
    tmp_path: Path,
) -> None:
    srv = ServerProc(tmp_path / "data", extra_args=("--heartbeat", "0.2"))
    with srv:
        agent, agent_log = srv.start_agent(tmp_path, "n1", FAKE)
        try:
            with srv.tenant_client("team") as team:
                until(lambda: team.get("/v1/devices").status_code == 200, "the API", 60)

                def submit(request: str, command: list[str]) -> int:
                    r = team.post("/v1/jobs", json={"request": request, "command": command})
                    assert r.status_code == 201, r.text
                    return int(r.json()["id"])

                with httpx.Client(base_url=srv.url, headers=srv.headers(), timeout=10) as admin:
                    until(lambda: admin.get("/v1/nodes").json(), "the agent's node", 60)
                submit("A100:1 kind=toy", writes("100"))
                submit("910B3:1 kind=toy", writes("70"))
                until(lambda: len(figures(srv.data)) == 2, "both figures stored", 120)
                assert figures(srv.data) == {"A100-SXM4-80GB": (100.0, 1), "910B3": (70.0, 1)}
            srv.stop()
            srv.start(same_port=True)
            with httpx.Client(base_url=srv.url, headers=srv.headers(), timeout=10) as admin:
                body = {"tenant": "team", "request": "any kind=toy policy=throughput"}
                r = admin.post("/v1/jobs", json={**body, "command": writes("100")})
                assert r.status_code == 201, r.text
                ours = int(r.json()["id"])

                def admitted(job_id: int) -> str:
                    events = admin.get(f"/v1/jobs/{job_id}").json()["events"]
                    return next((e["reason"] for e in events if "flavour" in e["reason"]), "")

                why = until(lambda: admitted(ours), "the team's job admitted", 90)
                assert "A100-SXM4-80GB: 1.0x, 910B3: 0.7x (measured, 2 runs)" in why, why
        finally:
            stop_process(agent)
            print(agent_log.read_text()[-2000:])


def test_plan_gives_the_callers_measured_speeds_and_no_other_tenants(tmp_path: Path) -> None:
    """``xpupool plan --model M`` against a server reads the caller's measured figures of M's
    serving jobs (``GET /v1/throughput``) and says so; another tenant neither reads them nor
    plans with them."""
    srv = ServerProc(tmp_path / "data", extra_args=("--heartbeat", "0.2"))
    with srv:
        agent, agent_log = srv.start_agent(tmp_path, "n1", FAKE)
        try:
            with srv.tenant_client("team") as team, srv.tenant_client("other") as other:
                with httpx.Client(base_url=srv.url, headers=srv.headers(), timeout=10) as admin:
                    until(lambda: admin.get("/v1/nodes").json(), "the agent's node", 60)
                for request, rate in (("A100:1", 100.0), ("910B3:1", 70.0)):
                    body = {"request": f"{request} kind=qwen2.5-7b", "command": SLEEPS}
                    r = team.post("/v1/jobs", json=body)
                    assert r.status_code == 201, r.text
                    job = int(r.json()["id"])

                    def reported(job: int = job, rate: float = rate) -> bool:
                        answer = team.post(f"/v1/jobs/{job}/progress", json={"rate": rate})
                        return answer.status_code == 200  # 409 until it runs

                    until(reported, f"job {job} running and reporting", 90)
                mine = team.get("/v1/throughput", params={"kind": "qwen2.5-7b"}).json()
                assert {m["model"] for m in mine} == {"A100-SXM4-80GB", "910B3"}, mine
                assert other.get("/v1/throughput").json() == []
                asked = other.get("/v1/throughput", params={"tenant": "team"})
                assert asked.status_code == 422 and asked.json()["field"] == "tenant", asked.text

                def plan(client: httpx.Client) -> str:
                    token = client.headers["Authorization"].split()[1]
                    env = {**os.environ, "XPUPOOL_URL": srv.url, "XPUPOOL_TOKEN": token}
                    argv = [*CLI, "plan", "--model", "qwen2.5-7b"]
                    done = subprocess.run(
                        argv, env=env, capture_output=True, text=True, timeout=60, check=False
                    )
                    assert done.returncode == 0, done.stderr
                    return done.stdout.strip().splitlines()[-1]

                line = plan(team)
                a100, ascend = (speed_of(line, m) for m in ("A100-SXM4-80GB", "910B3"))
                assert ascend / a100 == pytest.approx(0.7, abs=0.03), line  # 70 over 100
                assert "(measured, 2 runs)" in line, line
                assert "measured" not in plan(other)
        finally:
            stop_process(agent)
            print(agent_log.read_text()[-2000:])


def speed_of(line: str, model: str) -> float:
    """The speed ``line`` gives ``model`` (``"910B3: 0.7x"``)."""
    found = re.search(rf"(?:^|, |: ){re.escape(model)}: ([0-9.]+)x", line)
    assert found is not None, (model, line)
    return float(found.group(1))
