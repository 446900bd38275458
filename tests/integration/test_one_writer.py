"""One writer per data dir (issue 20): a second ``xpupool up`` or ``xpupool agent`` on a directory in
use exits at once with one line naming the holder, and the running one, and its jobs, go on."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
from job_commands import JOB_PYTHON
from server_proc import ServerProc, free_port, stop_process, until
from test_agent_e2e import _alive

CLI = [sys.executable, "-c", "from xpupool.cli import main; main()"]
CLUSTER = Path(__file__).parents[1] / "fixtures" / "agent" / "cluster-sim.yaml"
FAKE = Path(__file__).parents[1] / "fixtures" / "agent" / "fake-a100x2.yaml"
SLEEP = [JOB_PYTHON, "-c", "import time; print('sleeping', flush=True); time.sleep(120)"]


def tenant_client(srv: ServerProc) -> httpx.Client:
    admin = httpx.Client(base_url=srv.url, headers=srv.headers())
    with admin:
        admin.post("/v1/tenants", json={"name": "team"}).raise_for_status()
        token = admin.post("/v1/tenants/team/tokens", json={"role": "tenant"}).json()["token"]
    return httpx.Client(base_url=srv.url, headers=srv.headers(token))


def running_pid(user: httpx.Client, job_id: int) -> int:
    job = user.get(f"/v1/jobs/{job_id}").json()
    assert job["state"] == "running", job
    pids = [m.group(1) for e in job["events"] if (m := re.search(r"\(pid (\d+)\)", e["reason"]))]
    return int(pids[-1])


def test_a_second_up_on_a_data_dir_in_use_exits_at_once_and_changes_nothing(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    fast = ("--heartbeat", "0.2", "--lost-after", "1.5")
    with ServerProc(data, cluster=CLUSTER, agent=True, extra_args=fast) as srv:
        assert srv.proc is not None
        with tenant_client(srv) as user:
            job_id = user.post("/v1/jobs", json={"command": SLEEP, "spec": "A100"}).json()["id"]
            until(lambda: user.get(f"/v1/jobs/{job_id}").json()["state"] == "running", "running")
            pid = running_pid(user, job_id)
            files = sorted(p.name for p in data.iterdir())
            again = ["up", "--data", str(data), "--port", str(free_port()), "--cluster"]
            second = subprocess.run(
                [*CLI, *again, str(CLUSTER), *fast],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert second.returncode == 1
            said = (second.stdout + second.stderr).strip().splitlines()
            assert len(said) == 1, said
            assert f"is in use by another xpupool up (pid {srv.proc.pid})" in said[0]
            assert sorted(p.name for p in data.iterdir()) == files
            job = user.get(f"/v1/jobs/{job_id}").json()
            assert job["state"] == "running" and job["attempts"] == 1  # its one run, not a second
            assert running_pid(user, job_id) == pid and _alive(pid)
            assert user.post(f"/v1/jobs/{job_id}/cancel").status_code == 200


def test_a_second_agent_on_a_work_dir_in_use_exits_at_once(tmp_path: Path) -> None:
    work = tmp_path / "agent"
    with ServerProc(tmp_path / "data") as srv:
        admin = httpx.Client(base_url=srv.url, headers=srv.headers())
        with admin:
            admin.post("/v1/tenants", json={"name": "team"}).raise_for_status()
            r = admin.post("/v1/tenants/team/tokens", json={"role": "agent"})
            env = {**os.environ, "XPUPOOL_TOKEN": r.json()["token"]}
            args = [*CLI, "agent", "--server", srv.url, "--node", "box", "--fake", str(FAKE)]
            args += ["--work-dir", str(work), "--poll", "0.05"]
            first = subprocess.Popen(
                args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            try:
                until(lambda: admin.get("/v1/nodes/box").status_code == 200, "registration")
                second = subprocess.run(args, env=env, capture_output=True, text=True, timeout=60)
                assert second.returncode == 1
                said = (second.stdout + second.stderr).strip().splitlines()
                assert len(said) == 1, said
                assert f"is in use by another xpupool agent (pid {first.pid})" in said[0]
                assert first.poll() is None
                beat = admin.get("/v1/nodes/box").json()["last_heartbeat"]
                until(
                    lambda: admin.get("/v1/nodes/box").json()["last_heartbeat"] != beat,
                    "the first agent's next heartbeat",
                )
            finally:
                stop_process(first)
