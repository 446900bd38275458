"""A job that asks ``idle-stop`` on a real ``xpupool up`` with a real agent running a real
process (issue 54 part 5): its card, read busy by the agent's probe (a fake-probe file read each
period, as a vendor tool's output would be), keeps it running; once the card reads idle for the
job's whole window, the plane stops it and it ends failed, saying why."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from job_commands import JOB_PYTHON
from server_proc import ServerProc, stop_process, until

pytestmark = pytest.mark.slow

CARD = """devices:
  - vendor: nvidia
    model: NVIDIA A100-SXM4-80GB
    memory: 80Gi
    driver: 550.54.15
    runtimes: {{cuda: "12.4"}}
    uuid_prefix: GPU-idle
    utilization: {util}
"""
SLEEPS = [JOB_PYTHON, "-c", "import time; print('up', flush=True); time.sleep(600)"]


def test_a_job_whose_card_stays_idle_for_its_window_is_stopped_saying_why(
    tmp_path: Path,
) -> None:
    fake = tmp_path / "card.yaml"
    fake.write_text(CARD.format(util=90))
    with ServerProc(tmp_path / "data", extra_args=("--heartbeat", "0.5")) as srv:
        agent, agent_log = srv.start_agent(tmp_path, "n1", fake, "--grace", "1")
        try:
            with srv.tenant_client("team") as team:
                body = {"request": "A100:1 idle-stop=5%/1m", "command": SLEEPS}
                r = team.post("/v1/jobs", json=body)
                assert r.status_code == 201, r.text
                job_id = int(r.json()["id"])
                assert r.json()["request"]["idle_stop"] == "5%/1m"

                def job() -> dict[str, Any]:
                    return dict(team.get(f"/v1/jobs/{job_id}").json())

                until(lambda: job()["state"] == "running", "the job to run", 90)
                fake.write_text(CARD.format(util=2))  # the card goes idle from here
                until(lambda: job()["state"] == "failed", "the idle job to be stopped", 180)
                reason = job()["reason"]
                assert "idle: its 1 card(s) stayed under 5% utilisation for 1m" in reason, reason
        finally:
            stop_process(agent)
            print(agent_log.read_text()[-2000:])
