"""A replica's own view of the host's shared places (agent/launch/view.py, issue 43 items 12 and
13): its temp dir (a tmpfs as large as its memory limit), bound at /tmp and /var/tmp on the host
back end, and a /proc that shows a job only its own uid's processes. Real processes, real mounts,
as root (the only agent that can make a mount namespace)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_work import settings, started, work

from xpupool.agent.launch import LaunchSettings, UidRange, build_spec, spec_file
from xpupool.agent.launch.view import View, check_view, hidepid_supported, view_for
from xpupool.agent.runner import Replica, Runner

ROOT = os.geteuid() == 0
as_root = pytest.mark.skipif(not ROOT, reason="only root can make a mount namespace")
RANGE = UidRange(200000, 200099)

# What the job reports of its view, one JSON line (POSIX sh: the tenant's uid may not reach this
# checkout's Python).
PROBE = r"""
echo mine > "$HOME/mine"
echo x > /tmp/probe
echo y > /var/tmp/probe2
printf '{"cwd": "%s", "home": "%s", "tmp_is_tmpdir": %s, "var_tmp_is_tmpdir": %s,'\
' "fs": "%s", "pids": %s, "other": "%s"}\n' \
  "$(pwd)" "$(cat "$HOME/mine")" \
  "$([ -f "$TMPDIR/probe" ] && echo true || echo false)" \
  "$([ -f "$TMPDIR/probe2" ] && echo true || echo false)" \
  "$(stat -f -c %T "$TMPDIR")" "$(ls /proc | grep -c '^[0-9]')" \
  "$([ -e "/proc/$1" ] && echo seen || echo hidden)"
"""


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A directory under /tmp that every uid may pass through: the job root then lies below the
    /tmp the replica's own temp dir covers, which the launcher must bind back."""
    path = Path(tempfile.mkdtemp(prefix="xpupool-view-"))
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _run(runner: Runner, command: list[str], memory_mib: int) -> Replica:
    rep = started(runner.start(work(command, memory_mib=memory_mib, tenant_index=3)), runner)
    deadline = time.monotonic() + 20
    while rep.state == "running" and time.monotonic() < deadline:
        runner.poll()
        time.sleep(0.02)
    assert rep.state != "running", rep.log_path.read_text()
    return rep


@as_root
@pytest.mark.parametrize(("memory_mib", "fs"), [(64, "tmpfs"), (0, "")])
@pytest.mark.slow
def test_a_replica_has_its_own_tmp_and_sees_only_its_own_processes(
    open_dir: Path, memory_mib: int, fs: str
) -> None:
    cfg = LaunchSettings(
        job_root=open_dir / "jobs", uid_range=RANGE, private_view=True, hide_processes=True
    )
    runner = Runner("n1", open_dir / "agent", settings=cfg)
    rep = _run(runner, ["sh", "-c", PROBE, "probe", str(os.getpid())], memory_mib)
    text = rep.log_path.read_text()
    assert rep.state == "succeeded" and rep.spec is not None, text
    seen = json.loads(text.strip().splitlines()[-1])
    assert seen["cwd"] == str(rep.spec.workdir) and seen["home"] == "mine"  # bound back
    assert seen["tmp_is_tmpdir"] is True and seen["var_tmp_is_tmpdir"] is True
    if fs:
        assert seen["fs"] == fs  # counted against its memory limit
    else:
        assert seen["fs"] != "tmpfs"  # no limit to count it against: on the job root's disk
    assert seen["other"] == "hidden" and 1 <= seen["pids"] < 10
    assert not Path("/tmp/probe").exists() and not Path("/var/tmp/probe2").exists()
    assert not rep.spec.workdir.exists()


@as_root
@pytest.mark.slow
def test_what_a_replica_keeps_in_tmp_counts_against_its_memory(open_dir: Path) -> None:
    cfg = LaunchSettings(job_root=open_dir / "jobs", uid_range=RANGE, private_view=True)
    runner = Runner("n1", open_dir / "agent", settings=cfg)
    script = "head -c 67108864 /dev/zero > /tmp/big || exit 3; echo wrote 64 MiB"
    rep = _run(runner, ["sh", "-c", script], 32)
    text = rep.log_path.read_text()
    assert rep.state == "failed" and "wrote" not in text, text


@as_root
def test_the_agent_tries_the_view_at_start(tmp_path: Path) -> None:
    assert check_view(tmp_path / "jobs", hidepid_supported()) is None
    assert list((tmp_path / "jobs").iterdir()) == []  # nothing of the try is left


def test_hidden_processes_need_a_proc_of_their_own_from_linux_5_8() -> None:
    assert hidepid_supported("5.8.0") and hidepid_supported("6.18.44-fc-v782")
    assert hidepid_supported("5.10.0-28-amd64") and hidepid_supported("10.0")
    assert hidepid_supported("5.8-rc1")
    for old in ("5.7.19", "5.7-rc8", "4.19.0-25-amd64", "3.10.0-1160.el7.x86_64", "garbage", ""):
        assert not hidepid_supported(old), old


def test_which_view_each_back_end_gets(tmp_path: Path) -> None:
    spec = build_spec(work(["true"], memory_mib=256), tmp_path / "l.log", settings(tmp_path))
    assert spec.tmpfs_bytes == 0  # no private view here: no tmpfs either
    cfg = settings(tmp_path, private_view=True, hide_processes=True)
    spec = build_spec(work(["true"], memory_mib=256), tmp_path / "l.log", cfg)
    assert spec.tmpfs_bytes == 256 << 20
    assert spec.env["TMPDIR"] == spec.env["TMP"] == spec.env["TEMP"] == str(spec.tmpdir)
    assert view_for(spec, settings(tmp_path), sandboxed=False) is None
    assert view_for(spec, cfg, sandboxed=False) == View(spec.workdir, 256 << 20, True, True)
    assert view_for(spec, cfg, sandboxed=True) == View(spec.workdir, 256 << 20)  # bwrap: the rest
    unlimited = build_spec(work(["true"], memory_mib=0), tmp_path / "l.log", cfg)
    assert view_for(unlimited, cfg, sandboxed=True) is None
    back = spec_file.loads(spec_file.dumps(spec_file.SpecFile("host", cfg, spec, 1.0)))
    assert back.settings == cfg and back.spec.tmpfs_bytes == spec.tmpfs_bytes


def test_a_spec_file_of_an_older_agent_runs_in_the_agents_view(tmp_path: Path) -> None:
    spec = build_spec(work(["true"]), tmp_path / "l.log", settings(tmp_path))
    body = json.loads(spec_file.dumps(spec_file.SpecFile("host", settings(tmp_path), spec, 1.0)))
    for key in ("private_view", "hide_processes"):
        del body["settings"][key]
    del body["spec"]["tmpfs_bytes"]
    back = spec_file.loads(json.dumps(body).encode())
    assert not back.settings.private_view and back.spec.tmpfs_bytes == 0


def test_the_launchers_view_is_one_argument(tmp_path: Path) -> None:
    """The launcher reads the view as ``WORKDIR\\nBYTES\\nFLAGS`` (process.py); a job's command
    after it is never read as part of it."""
    from xpupool.agent.launch.process import launch_argv

    view = View(tmp_path, 5, private_tmp=True, hide_processes=True)
    argv = launch_argv(["echo", "hi"], env_fd=3, view=view)
    assert argv[-3:] == [f"{tmp_path}\n5\ntp", "echo", "hi"]
    assert launch_argv(["echo"], env_fd=3)[-2:] == ["", "echo"]


@as_root
def test_root_follows_no_link_of_the_jobs_on_the_way_back_to_its_directory(
    open_dir: Path, tmp_path: Path
) -> None:
    """The private /tmp is the job's own: a link in it where the path back to the working
    directory goes is refused, not followed (root would create directories where it points)."""
    from xpupool.agent.launch.host import HostBackend
    from xpupool.agent.launch.workdir import make_workdir

    cfg = LaunchSettings(job_root=open_dir / "jobs", uid_range=RANGE, private_view=True)
    spec = build_spec(work(["true"], memory_mib=0, tenant_index=3), tmp_path / "l.log", cfg)
    elsewhere = Path(tempfile.mkdtemp(prefix="xpupool-view-target-", dir="/var/lib"))
    try:
        make_workdir(spec)  # as the job's tmp would be, had it planted a link there
        top = spec.workdir.relative_to("/tmp").parts[0]
        (spec.tmpdir / top).symlink_to(elsewhere)
        launched = HostBackend(cfg).start(spec)
        assert launched.proc.wait(20) == 126
        HostBackend(cfg).cleanup(launched)
        said = (tmp_path / "l.log").read_text()
        assert "cannot set up the job's process" in said and top in said, said
        assert list(elsewhere.iterdir()) == []
    finally:
        shutil.rmtree(elsewhere, ignore_errors=True)
