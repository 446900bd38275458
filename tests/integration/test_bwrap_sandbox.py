"""``xpupool up --sandbox bwrap`` for real: a server subprocess, its in-process agent, and the job
as a real process inside bubblewrap (as a tenant's uid when the server runs as root, as here).
What the job tries is what a hostile tenant tried in issue 27: the admin token and the database by
absolute path, other processes' environments, the host's /tmp; what it must still have is its own
working directory."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from server_proc import ServerProc, until

CLUSTER = Path(__file__).parents[1] / "fixtures" / "agent" / "cluster-sim.yaml"
FINAL = ("succeeded", "failed", "cancelled", "lost")

# Runs inside the sandbox (POSIX sh: the tenant's uid may not reach this checkout's Python).
PROBE = r"""
data="$1"; server_pid="$2"
try() { if cat "$1" >/dev/null 2>&1; then echo read; else echo refused; fi; }
echo mine > mine.txt
echo scratch > /tmp/xpupool-sandbox-probe
pids=$(ls /proc | grep -c '^[0-9]*$')
if [ -e "/proc/$server_pid" ]; then server=seen; else server=hidden; fi
printf '{"token": "%s", "db": "%s", "logs": "%s", "mine": "%s", "cwd": "%s", "pids": %s,'\
' "server": "%s", "pid1_env": "%s"}\n' \
  "$(try "$data/admin-token")" "$(try "$data/state.db")" \
  "$(if ls "$data/logs" >/dev/null 2>&1; then echo listed; else echo refused; fi)" \
  "$(cat mine.txt)" "$(pwd)" "$pids" "$server" \
  "$(tr '\0' '\n' < /proc/1/environ 2>/dev/null | grep -c XPUPOOL_TOKEN)"
"""


@pytest.fixture(scope="module")
def sandboxed(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[ServerProc, httpx.Client]]:
    # jobs may run as another uid: their root must be reachable by it (not under pytest's 0700 tmp)
    jobs = Path(tempfile.mkdtemp(prefix="xpupool-test-jobs-", dir="/tmp"))
    jobs.chmod(0o711)
    srv = ServerProc(
        tmp_path_factory.mktemp("bwrap") / "data",
        cluster=CLUSTER,
        agent=True,
        extra_args=("--heartbeat", "0.2", "--sandbox", "bwrap", "--job-root", str(jobs)),
    )
    try:
        with srv:
            admin = httpx.Client(base_url=srv.url, headers=srv.headers())
            admin.post("/v1/tenants", json={"name": "mallory"}).raise_for_status()
            token = admin.post("/v1/tenants/mallory/tokens", json={"role": "tenant"}).json()
            admin.close()
            user = httpx.Client(base_url=srv.url, headers=srv.headers(token["token"]))
            try:
                yield srv, user
            finally:
                user.close()
    finally:
        shutil.rmtree(jobs, ignore_errors=True)


def test_start_banner_names_the_sandbox(sandboxed: tuple[ServerProc, httpx.Client]) -> None:
    srv, _ = sandboxed
    assert "backend bwrap" in srv.log()


def test_job_sees_only_its_own(sandboxed: tuple[ServerProc, httpx.Client]) -> None:
    srv, user = sandboxed
    assert srv.proc is not None
    data = str(srv.data.resolve())
    command = ["/bin/sh", "-c", PROBE, "probe", data, str(srv.proc.pid)]
    r = user.post("/v1/jobs", json={"command": command, "spec": "910B:1"})
    assert r.status_code == 201, r.text
    job_id = r.json()["id"]
    until(
        lambda: user.get(f"/v1/jobs/{job_id}").json()["state"] in ("succeeded", "failed"),
        f"the probe job ({srv.log()[-2000:]})",
        30,
    )
    logs = until(lambda: "{" in (t := user.get(f"/v1/jobs/{job_id}/logs").text) and t, "its log")
    assert user.get(f"/v1/jobs/{job_id}").json()["state"] == "succeeded", logs
    seen = json.loads(logs[logs.index("{") :].splitlines()[0])
    assert (seen["token"], seen["db"], seen["logs"]) == ("refused", "refused", "refused")
    assert seen["mine"] == "mine" and seen["cwd"] != data and not seen["cwd"].startswith(data)
    assert seen["pids"] < 10  # its own pid namespace: none of the host's processes
    assert seen["server"] == "hidden" and seen["pid1_env"] == "0"
    assert not Path("/tmp/xpupool-sandbox-probe").exists()  # a private /tmp
    assert os.path.exists(srv.data / "admin-token")  # it is there, only not for the job


TEMP = r"""
echo x > /tmp/probe
if [ -f "$TMPDIR/probe" ]; then echo "/tmp is TMPDIR"; fi
head -c 209715200 /dev/zero > "$TMPDIR/big" || exit 3
echo "wrote 200 MiB"
"""


def test_the_sandboxs_tmp_is_its_temp_dir_counted_against_its_memory(
    sandboxed: tuple[ServerProc, httpx.Client],
) -> None:
    """Issue 43 item 12 in the sandbox: /tmp was a tmpfs of bwrap's and $TMPDIR a directory on
    the disk that no limit counted (200 MiB written there under a 128 MiB limit). Both are now
    the replica's one temp dir, a tmpfs counted against its memory limit."""
    _, user = sandboxed
    body = {"command": ["/bin/sh", "-c", TEMP], "spec": "910B:1 memory=128Mi"}
    r = user.post("/v1/jobs", json=body)
    assert r.status_code == 201, r.text
    job_id = r.json()["id"]
    job = until(
        lambda: (j := user.get(f"/v1/jobs/{job_id}").json())["state"] in FINAL and j,
        "the job's end",
        60,
    )
    logs = user.get(f"/v1/jobs/{job_id}/logs").text
    assert "/tmp is TMPDIR" in logs, (job, logs)
    assert job["state"] == "failed" and "wrote 200 MiB" not in logs, (job, logs)
    assert "out of memory" in job["reason"] or "No space left" in logs, (job, logs)
