"""A job's environment never reaches a process that runs as root (issue 43, item 1).

The exploit: a tenant names a library in its job's ``env`` (``LD_PRELOAD``); the replica's
launcher, which runs as root until it switches to the tenant's uid, was started with that
environment, so the loader ran the library as root. Here a real preload library, compiled for the
test, leaves a marker file named after the effective uid it was loaded under; the job runs through
a real ``xpupool up`` (host back end, then ``--sandbox bwrap``) and a real standalone ``xpupool
agent``. No marker may say root; one must say the job's uid (ordinary jobs keep their
``LD_PRELOAD``: it then acts only as the job). Needs root (as in CI): otherwise there is no uid
switch and nothing to escalate to.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from server_proc import ServerProc, stop_process, until
from test_agent_e2e import FAKE

CLUSTER = Path(__file__).parents[1] / "fixtures" / "agent" / "cluster-sim.yaml"
ROOT = os.geteuid() == 0

pytestmark = pytest.mark.skipif(not ROOT, reason="the uid switch it attacks needs root (CI)")

MARKER_C = r"""
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>
__attribute__((constructor)) static void mark(void) {
    char path[600];
    uid_t e = geteuid();
    snprintf(path, sizeof path, "%s/%s-%d-%d", MARKS, e == 0 ? "root" : "user", (int)e,
             (int)getpid());
    int fd = open(path, O_WRONLY | O_CREAT, 0644);
    if (fd >= 0) close(fd);
}
"""


@dataclass
class Preload:
    library: Path
    marks: Path

    def seen(self) -> list[str]:
        return sorted(p.name for p in self.marks.iterdir())


@pytest.fixture
def preload() -> Iterator[Preload]:
    """The library and its marker directory, where any uid can reach them (not under pytest's
    0700 temp dir, nor the host's /tmp or /var/tmp, which a job no longer shares: issue 43 item
    12), as a tenant's file on shared storage would be."""
    gcc = shutil.which("gcc") or shutil.which("cc")
    assert gcc is not None, "a C compiler is needed to build the preload library"
    top = Path(tempfile.mkdtemp(prefix="xpupool-preload-", dir="/var/lib"))
    try:
        top.chmod(0o755)
        marks = top / "marks"
        marks.mkdir()
        marks.chmod(0o1777)
        source = top / "mark.c"
        source.write_text(MARKER_C)
        library = top / "mark.so"
        subprocess.run(
            [gcc, "-shared", "-fPIC", f'-DMARKS="{marks}"', "-o", str(library), str(source)],
            check=True,
        )
        library.chmod(0o755)
        yield Preload(library, marks)
    finally:
        shutil.rmtree(top, ignore_errors=True)


@pytest.fixture
def job_root() -> Iterator[Path]:
    jobs = Path(tempfile.mkdtemp(prefix="xpupool-test-jobs-", dir="/tmp"))
    jobs.chmod(0o711)
    try:
        yield jobs
    finally:
        shutil.rmtree(jobs, ignore_errors=True)


HOSTILE_ENV = {
    "GCONV_PATH": "/var/tmp/nowhere",
    "LOCPATH": "/var/tmp/nowhere",
    "MALLOC_CHECK_": "3",
    "MALLOC_PERTURB_": "165",
    "HOSTALIASES": "/var/tmp/nowhere/hosts",
}


def _run_preloaded(srv: ServerProc, user: httpx.Client, preload: Preload, spec: str) -> None:
    env = {"LD_PRELOAD": str(preload.library), **HOSTILE_ENV}
    r = user.post("/v1/jobs", json={"command": ["/bin/true"], "spec": spec, "env": env})
    assert r.status_code == 201, r.text
    job_id = r.json()["id"]
    job = until(
        lambda: (
            (j := user.get(f"/v1/jobs/{job_id}").json())["state"] in ("succeeded", "failed", "lost")
            and j
        ),
        f"job {job_id} to end ({srv.log()[-2000:]})",
        60,
    )
    assert job["state"] == "succeeded", job
    seen = preload.seen()
    assert not [m for m in seen if m.startswith("root-")], f"ran as root: {seen}"
    assert [m for m in seen if m.startswith("user-")], f"the job's own preload never ran: {seen}"


@pytest.mark.parametrize("sandbox", ["none", "bwrap"])
def test_a_preload_in_the_jobs_env_never_runs_as_root_under_up(
    tmp_path: Path, preload: Preload, job_root: Path, sandbox: str
) -> None:
    args = ("--heartbeat", "0.2", "--job-root", str(job_root), "--sandbox", sandbox)
    with ServerProc(tmp_path / "data", cluster=CLUSTER, agent=True, extra_args=args) as srv:
        user = srv.tenant_client("mallory")
        try:
            _run_preloaded(srv, user, preload, "cpu=100m")
        finally:
            user.close()


def test_a_preload_in_the_jobs_env_never_runs_as_root_under_a_standalone_agent(
    tmp_path: Path, preload: Preload, job_root: Path
) -> None:
    with ServerProc(tmp_path / "data", extra_args=("--heartbeat", "0.2")) as srv:
        agent, agent_log = srv.start_agent(tmp_path, "box", FAKE, "--job-root", str(job_root))
        user = srv.tenant_client("mallory")
        try:
            until(
                lambda: user.get("/v1/nodes/box").status_code == 200,
                f"the agent's registration ({agent_log})",
            )
            _run_preloaded(srv, user, preload, "A100:1")
        finally:
            stop_process(agent)
            user.close()
