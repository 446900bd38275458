"""The bwrap back end with the real bubblewrap (``.ci/run`` installs it): what a sandboxed replica
can see. The agent's private directory, the other replicas' directories and every device node but
its own are gone, even by absolute path; its working directory, a private /tmp and a /proc of its
own pid namespace are there. Device nodes come from a tmp tree standing in for /dev."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from agent_work import device, poll_until, settings, started, work

from xpupool.agent.launch import LaunchError
from xpupool.agent.launch.bwrap import check_bwrap, find_bwrap
from xpupool.agent.runner import Runner, group_alive

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="bubblewrap is Linux only"
)

# The sandbox's /tmp is its own: a checkout under /tmp (and its venv's python) is not there, so the
# jobs run the system's Python 3 (a plain one: the probes need no packages).
PYTHON = (
    "/usr/bin/python3" if Path("/usr/bin/python3").exists() else os.path.realpath(sys.executable)
)

# What the sandboxed job reports about its own view, as one JSON line.
PROBE = """
import json, os, sys
secret = sys.argv[1]
other = sys.argv[2]
def readable(p):
    try:
        with open(p) as f:
            return f.read()
    except OSError as exc:
        return type(exc).__name__
open('mine.txt', 'w').write('ok')
open('/tmp/scratch', 'w').write('x')
print(json.dumps({
    'secret': readable(secret),
    'other': os.path.exists(other),
    'cwd': os.getcwd(),
    'wrote': open('mine.txt').read(),
    'pids': sorted(int(p) for p in os.listdir('/proc') if p.isdigit()),
    'tmp': sorted(os.listdir('/tmp')),
    'dev': sorted(n for n in os.listdir('/dev') if n.startswith(('davinci', 'devmm', 'nvidia', 'hisi'))),
    'visible': os.environ.get('ASCEND_RT_VISIBLE_DEVICES'),
    'root_ro': os.access('/usr', os.W_OK),
}), flush=True)
"""


def test_bwrap_can_create_its_sandbox_here() -> None:
    """If this fails, the message is bwrap's own reason (no user namespaces, seccomp, ...)."""
    assert check_bwrap() == find_bwrap()


def test_bwrap_works_for_the_uid_jobs_run_as() -> None:
    """A root agent's jobs start bwrap as a tenant uid, which a host policy may treat unlike
    root: the start-up check tries that uid."""
    uid = 200000 if os.geteuid() == 0 else os.geteuid()
    assert check_bwrap(as_uid=uid) == find_bwrap()


def test_missing_bwrap_is_said_at_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(LaunchError, match="apt-get install bubblewrap"):
        check_bwrap()


@pytest.mark.slow
def test_sandboxed_replica_sees_only_its_own(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    (data / "admin-token").write_text("s3cret-admin-token\n")
    dev = tmp_path / "dev"
    dev.mkdir()
    for name in ("davinci0", "davinci1", "davinci2", "davinci_manager", "devmm_svm", "hisi_hdc"):
        (dev / name).touch()
    cfg = settings(tmp_path, sandbox="bwrap", device_root=dev, private_paths=(data,))
    runner = Runner("n1", data / "agent", settings=cfg)
    other = started(
        runner.start(work([PYTHON, "-c", "import time; time.sleep(30)"], job_id=8)), runner
    )
    assert other is not None and other.spec is not None
    secret = str((data / "admin-token").resolve())
    rep = started(
        runner.start(
            work(
                [PYTHON, "-c", PROBE, secret, str(other.spec.workdir)],
                devices=[device(1, vendor="huawei")],
            )
        ),
        runner,
    )
    assert rep is not None and rep.spec is not None
    poll_until(lambda: runner.replicas[(7, 0)].state != "running", runner)
    out = rep.log_path.read_text()
    assert runner.replicas[(7, 0)].state == "succeeded", out
    seen = json.loads(out.strip().splitlines()[-1])
    workdir = rep.spec.workdir
    assert seen["secret"] in ("FileNotFoundError", "PermissionError")  # not the token
    assert seen["other"] is False  # another replica's directory is not there
    assert seen["cwd"] == str(workdir) and seen["wrote"] == "ok"
    # a private /tmp: its own file, and at most the path down to its own directory
    path_to_own = {workdir.parts[2]} if workdir.parts[1] == "tmp" else set()
    assert set(seen["tmp"]) == {"scratch", *path_to_own}
    assert not Path("/tmp/scratch").exists()
    assert max(seen["pids"]) < 10 and os.getpid() not in seen["pids"]  # its own pid namespace
    assert seen["dev"] == ["davinci1", "davinci_manager", "devmm_svm", "hisi_hdc"]
    assert seen["visible"] == "0"  # its one card, as the sandbox numbers it
    assert seen["root_ro"] is False
    runner.shutdown(timeout_s=10)


@pytest.mark.slow
def test_sandboxed_replica_is_stopped_with_its_group(tmp_path: Path) -> None:
    runner = Runner(
        "n1", tmp_path / "agent", grace_s=5.0, settings=settings(tmp_path, sandbox="bwrap")
    )
    code = "import time; print('up', flush=True); time.sleep(60)"
    rep = started(runner.start(work([PYTHON, "-c", code])), runner)
    assert rep is not None and runner.settings.backend_name(None) == "bwrap"
    poll_until(lambda: rep.log_path.read_bytes().startswith(b"up"), runner)
    runner.stop(7, 0)
    poll_until(lambda: runner.replicas[(7, 0)].state == "stopped", runner)
    assert rep.pid is not None and not group_alive(rep.pid)


@pytest.mark.slow
def test_image_job_without_runtime_is_refused_with_the_reason(tmp_path: Path) -> None:
    runner = Runner("n1", tmp_path / "agent", settings=settings(tmp_path, sandbox="bwrap"))
    rep = started(runner.start(work([], image="busybox")), runner)
    assert rep is not None and rep.state == "failed"
    assert "container runtime" in rep.reason
