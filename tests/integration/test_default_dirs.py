"""``xpupool up`` and ``xpupool agent`` started as a user types them: in a folder of their own,
with their default data dir (``.xpupool``) and work dir (``.xpupool-agent``), both relative.

Issue 42: each replica's supervisor runs in ``/`` and was handed its directory as the agent
had it, relative, so it could not write its status and every job failed ("its supervisor ended
before it did"); the tests that started servers with absolute directories never saw it. Both
tests run a job to ``succeeded`` and read back what it printed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
from job_commands import JOB_PYTHON
from server_proc import CLUSTER_MIXED, DEFAULT_DATA, ServerProc, stop_process, until

FAKE = Path(__file__).parents[1] / "fixtures" / "agent" / "fake-a100x2.yaml"
CLI = [sys.executable, "-c", "from xpupool.cli import main; main()"]
PRINT_CARDS = [JOB_PYTHON, "-c", "import os; print('cards', os.environ['CUDA_VISIBLE_DEVICES'])"]


def _tenant(srv: ServerProc) -> httpx.Client:
    """A client acting as a new tenant ``team`` (the admin runs no jobs of its own)."""
    with httpx.Client(base_url=srv.url, headers=srv.headers()) as admin:
        admin.post("/v1/tenants", json={"name": "team"}).raise_for_status()
        r = admin.post("/v1/tenants/team/tokens", json={"role": "tenant"})
        r.raise_for_status()
    return httpx.Client(base_url=srv.url, headers=srv.headers(r.json()["token"]))


def _run_to_the_end(user: httpx.Client, spec: str, what: str) -> tuple[dict[str, Any], str]:
    """Submit ``PRINT_CARDS`` on ``spec``; the job once it has ended, and its log."""
    r = user.post("/v1/jobs", json={"command": PRINT_CARDS, "spec": spec})
    assert r.status_code == 201, r.text
    job_id = r.json()["id"]
    job = until(
        lambda: (
            (j := user.get(f"/v1/jobs/{job_id}").json())["state"]
            in ("succeeded", "failed", "cancelled", "lost")
            and j
        ),
        f"job {job_id} to end ({what})",
        60,
    )
    return job, user.get(f"/v1/jobs/{job_id}/logs").text


def test_up_with_its_default_data_dir_runs_a_job(tmp_path: Path) -> None:
    with (
        ServerProc(tmp_path / DEFAULT_DATA, cwd=tmp_path, cluster=CLUSTER_MIXED, agent=True) as srv,
        _tenant(srv) as user,
    ):
        job, log = _run_to_the_end(user, "A100", srv.log())
    assert job["state"] == "succeeded", (job["reason"], job["events"])
    assert job["exit_code"] == 0
    assert "cards 0" in log or "cards 1" in log, log
    assert (tmp_path / DEFAULT_DATA / "state.db").is_file()  # the default, in the folder


def test_agent_with_its_default_work_dir_runs_a_job(tmp_path: Path) -> None:
    folder = tmp_path / "host"
    folder.mkdir()
    with ServerProc(tmp_path / "data") as srv, _tenant(srv) as user:
        with httpx.Client(base_url=srv.url, headers=srv.headers()) as admin:
            r = admin.post("/v1/tenants/team/tokens", json={"role": "agent"})
            r.raise_for_status()
        token = r.json()["token"]
        agent_log = tmp_path / "agent.log"
        with agent_log.open("wb") as out:
            agent = subprocess.Popen(
                [*CLI, "agent", "--server", srv.url, "--node", "box", "--fake", str(FAKE)],
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=folder,
                env={**os.environ, "XPUPOOL_TOKEN": token},
            )
        try:
            until(
                lambda: admin_get(srv, "/v1/nodes/box").status_code == 200,
                f"the agent's node ({agent_log.read_text()[-2000:]})",
            )
            job, log = _run_to_the_end(user, "A100", agent_log.read_text()[-2000:])
        finally:
            stop_process(agent)
    assert job["state"] == "succeeded", (job["reason"], job["events"])
    assert "cards 0" in log or "cards 1" in log, log
    assert (folder / ".xpupool-agent" / "box").is_dir()  # the default, in the folder


def admin_get(srv: ServerProc, path: str) -> httpx.Response:
    return httpx.get(f"{srv.url}{path}", headers=srv.headers(), timeout=5)
