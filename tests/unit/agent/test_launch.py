"""The launch specification and the host back end against real processes: who a job runs as, what
it sees, where it runs, how much of its output is kept."""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_work import settings, started, work

from xpupool.agent.launch import LaunchSettings, UidRange, build_spec
from xpupool.agent.launch.identity import isolation_notice
from xpupool.agent.runner import Replica, Runner
from xpupool.log_rotation import read_kept

ROOT = os.geteuid() == 0
as_root = pytest.mark.skipif(not ROOT, reason="switching uids needs root")
RANGE = UidRange(200000, 200099)


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A directory every uid may pass through (pytest's own tmp dirs are 0700)."""
    path = Path(tempfile.mkdtemp(prefix="xpupool-launch-"))
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _finish(runner: Runner, rep: Replica, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while rep.state == "running" and time.monotonic() < deadline:
        runner.poll()
        time.sleep(0.02)
    assert rep.state != "running", rep.log_path.read_text()


def test_the_environment_is_built_not_inherited(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENT_ONLY", "secret")
    monkeypatch.setenv("XPUPOOL_TOKEN", "tok")
    spec = build_spec(
        work(["true"], env={"MINE": "1", "PATH": "/opt/x/bin"}),
        tmp_path / "log",
        settings(tmp_path, base_path="/usr/bin:/bin"),
        node_vendors=("nvidia",),
    )
    assert "AGENT_ONLY" not in spec.env and "XPUPOOL_TOKEN" not in spec.env
    assert spec.env["MINE"] == "1"
    assert spec.env["PATH"] == "/opt/x/bin"  # the job's own wins over the base
    assert spec.env["HOME"] == str(spec.workdir)
    assert spec.env["TMPDIR"] == str(spec.workdir / "tmp")
    assert spec.env["CUDA_VISIBLE_DEVICES"] == ""  # a CPU job on a GPU node sees no GPU
    assert spec.workdir.parent == tmp_path / "jobs"
    assert (spec.uid, spec.gid, spec.cgroup) == (None, None, None)


def test_uid_range_rules() -> None:
    assert UidRange.parse("200000-299999", agent_uid=0) == UidRange(200000, 299999)
    assert RANGE.uid_for(0) == 200000 and RANGE.uid_for(99) == 200099
    assert RANGE.uid_for(100) is None
    for bad, why in (
        ("0-10", "root"),
        ("1000-2000", "agent's own uid"),
        ("20-10", "below"),
        ("abc", "FIRST-LAST"),
    ):
        with pytest.raises(ValueError, match=why):
            UidRange.parse(bad, agent_uid=1500)


def test_a_tenant_beyond_the_range_or_without_an_index_is_refused(tmp_path: Path) -> None:
    runner = Runner("n1", tmp_path, settings=settings(tmp_path, uid_range=RANGE))
    rep = started(runner.start(work(["true"], tenant_index=100)), runner)
    assert rep is not None and rep.state == "failed"
    assert "no uid in the job uid range" in rep.reason
    rep = started(runner.start(work(["true"], job_id=8, tenant_index=None)), runner)
    assert rep is not None and rep.state == "failed" and "no tenant index" in rep.reason


@as_root
@pytest.mark.slow
def test_a_root_agent_runs_the_job_as_the_tenants_uid_in_a_private_directory(
    open_dir: Path,
) -> None:
    runner = Runner(
        "n1",
        open_dir / "agent",
        settings=LaunchSettings(job_root=open_dir / "jobs", uid_range=RANGE),
    )
    script = 'echo "$(id -u) $(id -g) $(id -G)"; stat -c "%a %u" .; touch mine; echo ok'
    rep = started(runner.start(work(["sh", "-c", script], tenant_index=7)), runner)
    assert rep is not None and rep.spec is not None
    workdir = rep.spec.workdir
    _finish(runner, rep)
    assert rep.state == "succeeded", rep.log_path.read_text()
    out = rep.log_path.read_text().split("\n")
    assert out[0] == "200007 200007 200007"  # supplementary groups dropped
    assert out[1] == "700 200007"
    assert stat.S_IMODE((open_dir / "jobs").stat().st_mode) == 0o711
    assert (open_dir / "jobs").stat().st_uid == 0
    assert not workdir.exists()  # scratch: removed with the replica
    assert stat.S_IMODE(rep.log_path.stat().st_mode) == 0o600  # the agent's, not the job's


@as_root
@pytest.mark.slow
def test_a_job_root_the_job_uid_cannot_reach_is_refused_with_the_reason(tmp_path: Path) -> None:
    os.chmod(tmp_path, 0o700)
    runner = Runner("n1", tmp_path, settings=settings(tmp_path, uid_range=RANGE))
    rep = started(runner.start(work(["true"])), runner)
    assert rep is not None and rep.state == "failed"
    assert "does not let other users through" in rep.reason


@as_root
@pytest.mark.slow
def test_a_replica_running_as_another_uid_still_dies_with_its_supervisor(open_dir: Path) -> None:
    """PR_SET_PDEATHSIG is set after the uid switch (a credential change clears it)."""
    here = Path(__file__).parent
    agent = (
        "import sys, time\n"
        "from pathlib import Path\n"
        f"sys.path.insert(0, {str(here)!r})\n"
        "from agent_work import started, work\n"
        "from xpupool.agent.launch import LaunchSettings, UidRange\n"
        "from xpupool.agent.runner import Runner\n"
        f"root = Path({str(open_dir)!r})\n"
        "s = LaunchSettings(job_root=root / 'jobs', uid_range=UidRange(200000, 200099))\n"
        "r = Runner('n1', root / 'agent', settings=s)\n"
        "rep = started(r.start(work(['sleep', '60'])), r)\n"
        "print(rep.pid, rep.status.supervisor_pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", agent], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        pid, supervisor = map(int, proc.stdout.readline().split())
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # until the launcher has become the job
            status = Path(f"/proc/{pid}/status").read_text()
            if "sleep" in Path(f"/proc/{pid}/comm").read_text():
                break
            time.sleep(0.02)
        assert "\nUid:\t200000\t" in status
        proc.kill()
        proc.wait(5)
        os.kill(supervisor, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            stat_text = Path(f"/proc/{pid}/stat").read_text()
            if stat_text[stat_text.rfind(")") + 2] in "ZX":
                break
            time.sleep(0.05)
        else:
            assert not Path(f"/proc/{pid}").exists()
    finally:
        proc.kill()


@pytest.mark.slow
def test_a_replica_writing_past_the_cap_keeps_writing_and_its_last_bytes_are_kept(
    tmp_path: Path,
) -> None:
    """The log keeps its last ``log_cap_bytes`` (log_rotation.py): the job is neither blocked
    nor killed, its last line is kept, offsets are those of its whole output, and shipping
    skips what was rotated away before it was sent."""
    runner = Runner("n1", tmp_path, settings=settings(tmp_path, log_cap_bytes=4096))
    code = (
        "import sys\nfor _ in range(200):\n    sys.stdout.write('y' * 1000 + '\\n')\n"
        "print('the end')\n"
    )
    rep = started(runner.start(work([sys.executable, "-c", code])), runner)
    assert rep is not None and rep.spec is not None
    _finish(runner, rep)
    assert rep.state == "succeeded"  # not blocked on a full pipe, not killed
    size = rep.log_path.stat().st_size
    assert size >= 200 * 1001  # offsets of the whole output
    with rep.log_path.open("rb") as f:
        skipped, kept = read_kept(f.fileno(), 0, 1 << 20)
    assert kept.endswith(b"y" * 1000 + b"\nthe end\n"), kept[-100:]
    assert 0 < len(kept) <= 4096 and skipped + len(kept) == size
    assert b"log cut" not in kept
    assert rep.log_path.stat().st_blocks * 512 <= 2 * 4096  # the rest is gone from the disk
    sent: list[tuple[int, bytes]] = []
    rep.shipped = 0  # as if nothing had been sent: all but the kept bytes were rotated away
    runner.ship_logs(lambda job, replica, chunk, offset, attempt: sent.append((offset, chunk)))
    assert sent[0][0] == skipped and b"".join(c for _, c in sent) == kept
    assert rep.shipped == size


def test_the_notice_when_jobs_get_no_isolation() -> None:
    assert isolation_notice("none", euid=0) is None
    assert isolation_notice("bwrap", euid=1000) is None
    notice = isolation_notice("none", euid=1000)
    assert notice is not None and "can read what it can read" in notice


def test_bad_launch_options_name_the_option(tmp_path: Path) -> None:
    import click

    from xpupool.agent.launch.options import launch_settings

    cases = [
        (("0-5", None, "64Mi"), "--job-uid-range", "root"),
        (("200000-299999", None, "0"), "--log-cap", "more than 0"),
        (("200000-299999", None, "64Qi"), "--log-cap", "unit"),
    ]
    for args, option, why in cases:
        with pytest.raises(click.BadParameter, match=why) as caught:
            launch_settings(*args)
        assert caught.value.param_hint == option
    data = tmp_path / "data"
    with pytest.raises(click.BadParameter, match="agent's own files") as caught:
        launch_settings("200000-299999", str(data / "jobs"), "64Mi", private_paths=(data,))
    assert caught.value.param_hint == "--job-root"
