"""CPU and memory limits by cgroups: the version this host has, for real; the other against a fake
cgroupfs tree (a directory laid out as the kernel's, with the module pointed at it)."""

from __future__ import annotations

import os
import shutil
import signal
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from agent_work import settings, started, work

from xpupool.agent.launch import build_spec, cgroups
from xpupool.agent.launch.backend import backend_for
from xpupool.agent.launch.cgroups import DEFAULT_PIDS_MAX, CgroupHost, detect_cgroups
from xpupool.agent.runner import Runner

HOST = detect_cgroups()


def _fake_v2(root: Path) -> Path:
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpuset cpu io memory hugetlb pids rdma misc\n")
    (root / "cgroup.subtree_control").write_text("\n")
    return root


def _fake_v1(root: Path) -> Path:
    for controller, probe in (("memory", "memory.limit_in_bytes"), ("cpu", "cpu.cfs_quota_us")):
        (root / controller / "agent.slice").mkdir(parents=True)
        (root / controller / probe).write_text("-1\n")
    return root


def test_v2_fake_tree_places_a_replica_with_memory_max_and_cpu_max(tmp_path: Path) -> None:
    root = _fake_v2(tmp_path / "cgroup")
    host = detect_cgroups(root, self_cgroup="0::/system.slice/xpupool.service\n")
    base = root / "xpupool"
    assert host == CgroupHost(2, base, base, base, base)
    delegated = "+memory +cpu +pids"
    assert (root / "cgroup.subtree_control").read_text() == delegated
    assert (root / "xpupool" / "cgroup.subtree_control").read_text() == delegated
    plan = host.plan("n1-7-0-1-ab", memory_mib=2048, cpu_milli=1500)
    assert plan is not None
    cgroups.create(plan)
    leaf = root / "xpupool" / "n1-7-0-1-ab"
    assert (leaf / "memory.max").read_text() == str(2048 << 20)
    assert (leaf / "cpu.max").read_text() == "150000 100000"
    assert plan.procs_files == (str(leaf / "cgroup.procs"),)
    assert (leaf / "pids.max").read_text() == str(cgroups.DEFAULT_PIDS_MAX)
    assert plan.describe() == f"limits: cgroup v2 memory=2048Mi cpu=1500m pids={DEFAULT_PIDS_MAX}"
    (leaf / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n")
    assert cgroups.oom_kills(plan) == 1


def test_v2_without_the_controllers_is_not_used(tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    root.mkdir()
    (root / "cgroup.controllers").write_text("pids io\n")
    assert detect_cgroups(root, self_cgroup="0::/\n") is None


def test_v1_fake_tree_nests_under_the_agents_own_cgroup(tmp_path: Path) -> None:
    root = _fake_v1(tmp_path / "cgroup")
    own = "5:memory:/agent.slice\n3:cpu,cpuacct:/agent.slice\n0::/\n"
    host = detect_cgroups(root, self_cgroup=own)
    assert host is not None and host.version == 1
    assert host.memory_base == root / "memory" / "agent.slice" / "xpupool"
    assert host.cpu_base == root / "cpu" / "agent.slice" / "xpupool"
    plan = host.plan("r", memory_mib=512, cpu_milli=250)
    assert plan is not None
    cgroups.create(plan)
    assert (plan.memory_dir / "memory.limit_in_bytes").read_text() == str(512 << 20)
    assert (plan.cpu_dir / "cpu.cfs_quota_us").read_text() == "25000"
    assert (plan.cpu_dir / "cpu.cfs_period_us").read_text() == "100000"
    assert plan.describe() == "limits: cgroup v1 memory=512Mi cpu=250m"
    (plan.memory_dir / "memory.oom_control").write_text(
        "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n"
    )
    assert cgroups.oom_kills(plan) == 2


def test_a_parent_removed_by_another_agent_is_made_again(tmp_path: Path) -> None:
    """Agents in one cgroup share the parent; one that exits removes it while it is empty."""
    for version, root, own in (
        (1, _fake_v1(tmp_path / "v1"), "5:memory:/agent.slice\n3:cpu,cpuacct:/agent.slice\n"),
        (2, _fake_v2(tmp_path / "v2"), "0::/\n"),
    ):
        host = detect_cgroups(root, self_cgroup=own)
        assert host is not None and host.version == version
        shutil.rmtree(host.memory_base)  # the other agent's exit (its release(), on cgroupfs)
        shutil.rmtree(host.cpu_base, ignore_errors=True)
        plan = host.plan("r", memory_mib=64, cpu_milli=0)
        assert plan is not None
        cgroups.create(plan)
        assert plan.memory_dir.is_dir()


def test_no_limit_asked_still_means_a_cgroup_with_a_task_limit(tmp_path: Path) -> None:
    """Issue 43: a job that asked for neither cpu= nor memory= had no cgroup, so nothing held a
    process that left its group."""
    host = detect_cgroups(_fake_v2(tmp_path / "cgroup"), self_cgroup="0::/\n")
    assert host is not None
    plan = replace(host, pids_max=64).plan("r", memory_mib=0, cpu_milli=0)
    cgroups.create(plan)
    assert (plan.memory_dir / "pids.max").read_text() == "64"
    assert not (plan.memory_dir / "memory.max").exists()
    assert plan.describe() == "limits: cgroup v2 pids=64"


def test_v2_kill_uses_cgroup_kill_or_freezes_and_thaws(tmp_path: Path) -> None:
    host = detect_cgroups(_fake_v2(tmp_path / "cgroup"), self_cgroup="0::/\n")
    assert host is not None
    plan = host.plan("r", memory_mib=0, cpu_milli=0)
    cgroups.create(plan)
    leaf = plan.memory_dir
    (leaf / "cgroup.events").write_text("populated 0\nfrozen 1\n")
    (leaf / "cgroup.freeze").write_text("0")
    cgroups.kill_all(plan)
    assert (leaf / "cgroup.freeze").read_text() == "0"  # frozen for the kills, then thawed
    (leaf / "cgroup.kill").write_text("")
    cgroups.kill_all(plan)
    assert (leaf / "cgroup.kill").read_text() == "1"


def test_v1_pids_and_freezer_where_mounted(tmp_path: Path) -> None:
    root = _fake_v1(tmp_path / "cgroup")
    own = "9:pids:/agent.slice\n7:freezer:/\n5:memory:/agent.slice\n3:cpu,cpuacct:/agent.slice\n"
    for controller, probe, parent in (
        ("pids", "pids.max", "agent.slice/xpupool"),
        ("freezer", "freezer.state", "xpupool"),
    ):
        (root / controller).mkdir()
        (root / controller / "cgroup.procs").write_text("")
        (root / controller / parent).mkdir(parents=True)
        (root / controller / parent / probe).write_text("max\n")  # what the kernel would make
    host = detect_cgroups(root, self_cgroup=own)
    assert host is not None
    assert host.pids_base == root / "pids" / "agent.slice" / "xpupool"
    assert host.freezer_base == root / "freezer" / "xpupool"
    plan = replace(host, pids_max=100).plan("r", memory_mib=0, cpu_milli=0)
    cgroups.create(plan)
    assert plan.pids_dir is not None and plan.freezer_dir is not None
    assert (plan.pids_dir / "pids.max").read_text() == "100"
    assert str(plan.freezer_dir / "cgroup.procs") in plan.procs_files
    (plan.freezer_dir / "freezer.state").write_text("THAWED")
    cgroups.kill_all(plan)  # nobody in it; frozen (the fake never reports FROZEN), then thawed
    assert (plan.freezer_dir / "freezer.state").read_text() == "THAWED"


def test_a_tree_that_is_not_there_is_not_used(tmp_path: Path) -> None:
    assert detect_cgroups(tmp_path / "nothing", self_cgroup="0::/\n") is None


@pytest.mark.slow
def test_this_hosts_cgroups_hold_a_real_replica_and_go_with_it(tmp_path: Path) -> None:
    """The machine's own version, for real: the process is in its cgroup from its first
    instruction (it reads its own limit), and the cgroup is removed when it ends."""
    assert HOST is not None, "no writable cgroup hierarchy on this host: limits are untested"
    script = (
        "import sys\n"
        "print(open('/proc/self/cgroup').read(), flush=True)\n"
        "sys.stdin and __import__('time').sleep(0.5)\n"
    )
    runner = Runner("n1", tmp_path, settings=settings(tmp_path, cgroups=HOST))
    rep = started(
        runner.start(work([sys.executable, "-c", script], memory_mib=300, cpu_milli=700)), runner
    )
    assert rep is not None and rep.spec is not None
    plan = rep.spec.cgroup
    assert plan is not None
    deadline = time.monotonic() + 10  # the launcher joins it before it execs the job
    while rep.pid not in cgroups.members(plan) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert rep.pid in cgroups.members(plan)
    limit = "memory.max" if plan.version == 2 else "memory.limit_in_bytes"
    assert (plan.memory_dir / limit).read_text().strip() == str(300 << 20)
    assert rep.limits.startswith(f"limits: cgroup v{plan.version} memory=300Mi cpu=700m")
    deadline = time.monotonic() + 20
    while rep.state == "running" and time.monotonic() < deadline:
        runner.poll()
        time.sleep(0.05)
    assert rep.state == "succeeded"
    assert f"/{plan.memory_dir.name}" in rep.log_path.read_text()
    assert not plan.memory_dir.exists() and not plan.cpu_dir.exists()


@pytest.mark.slow
def test_a_process_that_leaves_its_group_is_still_stopped(tmp_path: Path) -> None:
    """setsid takes a process out of the replica's process group, not out of its cgroup."""
    assert HOST is not None, "no writable cgroup hierarchy on this host: limits are untested"
    runner = Runner("n1", tmp_path, grace_s=0.2, settings=settings(tmp_path, cgroups=HOST))
    escape = "setsid sleep 60 & echo escaped; sleep 60"
    rep = started(runner.start(work(["sh", "-c", escape], memory_mib=64)), runner)
    assert rep is not None and rep.spec is not None and rep.spec.cgroup is not None
    plan = rep.spec.cgroup
    # The setsid'd sleep: "escaped" may be written before its setsid(2) ran, so wait for it to
    # show up in its own process group (a fixed pause was too short on a loaded machine).
    others = escaped(plan, rep.pid, time.monotonic() + 10)
    assert others
    runner.stop(7, 0)
    deadline = time.monotonic() + 10
    while rep.state == "running" and time.monotonic() < deadline:
        runner.poll()
        time.sleep(0.05)
    assert rep.state == "stopped"
    for pid in others:  # gone, or a zombie waiting for init to reap it
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        assert stat[stat.rfind(")") + 2] in "ZX", stat


def escaped(plan: cgroups.CgroupPlan, group: int, deadline: float) -> list[int]:
    """The members of ``plan``'s cgroup outside process group ``group``, once there are any (or
    none at ``deadline``); a member that exits meanwhile is skipped."""
    while True:
        found = []
        for pid in cgroups.members(plan):
            try:
                if os.getpgid(pid) != group:
                    found.append(pid)
            except ProcessLookupError:
                continue
        if found or time.monotonic() >= deadline:
            return found
        time.sleep(0.05)


@pytest.mark.slow
def test_what_a_job_without_limits_leaves_behind_dies_before_it_is_reported_over(
    tmp_path: Path,
) -> None:
    """Issue 43: a ``setsid`` child of a job that asked for neither cpu= nor memory= outlived
    it (and its cancel) with the job's cards in its environment. Now the replica's cgroup holds
    it, and the replica is reported over only once it is gone."""
    assert HOST is not None, "no writable cgroup hierarchy on this host: limits are untested"
    runner = Runner("n1", tmp_path, grace_s=0.2, settings=settings(tmp_path, cgroups=HOST))
    script = "setsid sleep 300 & echo child=$!"
    rep = started(runner.start(work(["sh", "-c", script], memory_mib=0, cpu_milli=0)), runner)
    assert rep is not None and rep.spec is not None
    assert rep.spec.cgroup is not None  # a cgroup although no limit was asked
    deadline = time.monotonic() + 20
    while rep.state == "running" and time.monotonic() < deadline:
        runner.poll()
        time.sleep(0.05)
    assert rep.state == "succeeded", rep.reason
    text = rep.log_path.read_text()
    child = int(text.split("child=")[1].split()[0])
    try:
        stat = Path(f"/proc/{child}/stat").read_text()
    except OSError:
        return  # gone
    assert stat[stat.rfind(")") + 2] in "ZX", f"the setsid child still runs: {stat}"


@pytest.mark.slow
def test_a_replica_cannot_fork_past_its_task_limit(tmp_path: Path) -> None:
    assert HOST is not None, "no writable cgroup hierarchy on this host: limits are untested"
    if HOST.pids_base is None:
        raise AssertionError("no pids controller on this host: the task limit is untested")
    limited = replace(HOST, pids_max=20)
    runner = Runner("n1", tmp_path, grace_s=0.2, settings=settings(tmp_path, cgroups=limited))
    script = "i=0; while [ $i -lt 60 ]; do sleep 30 & i=$((i+1)); done; echo spawned; exit 0"
    rep = started(runner.start(work(["sh", "-c", script], memory_mib=0, cpu_milli=0)), runner)
    assert rep is not None and rep.spec is not None and rep.spec.cgroup is not None
    assert "pids=20" in rep.limits
    deadline = time.monotonic() + 30
    while rep.state == "running" and time.monotonic() < deadline:
        runner.poll()
        time.sleep(0.05)
    assert rep.state != "running"
    text = rep.log_path.read_text()
    assert "fork" in text.lower() or "resource temporarily unavailable" in text.lower(), text


def test_the_supervisors_copy_of_the_plan_keeps_pids_and_freezer(tmp_path: Path) -> None:
    """The supervisor starts the replica from the spec file: a plan that lost its pids and
    freezer directories there would not limit or freeze anything (seen while writing this)."""
    from xpupool.agent.launch import build_spec, spec_file

    host = CgroupHost(1, tmp_path / "m", tmp_path / "c", tmp_path / "p", tmp_path / "f", 99)
    cfg = settings(tmp_path, cgroups=host)
    spec = build_spec(work(["true"], memory_mib=0, cpu_milli=0), tmp_path / "l.log", cfg)
    back = spec_file.loads(spec_file.dumps(spec_file.SpecFile("host", cfg, spec, 1.0)))
    assert back.spec.cgroup == spec.cgroup and back.settings.cgroups == host


@pytest.mark.slow
def test_a_signal_reaches_each_process_of_a_replica_once(tmp_path: Path) -> None:
    """Seen in CI: an elastic job printed its shrink twice. The host back end sent a signal to
    the replica's process group and then to every member of its cgroup, so a process in both (all
    of them, until one calls ``setsid``) got it twice: a job counting SIGUSR1 (a resize, a
    checkpoint) saw two. A real-time signal is queued, not merged, so the job counts what came."""
    assert HOST is not None, "no writable cgroup hierarchy on this host: limits are untested"
    script = (
        "import signal\n"
        "waited = {signal.SIGRTMIN, signal.SIGUSR2}\n"
        "signal.pthread_sigmask(signal.SIG_BLOCK, waited)\n"
        "print('ready', flush=True)\n"
        "signal.sigwait({signal.SIGUSR2})\n"
        "n = 0\n"
        "while signal.sigtimedwait({signal.SIGRTMIN}, 0) is not None:\n"
        "    n += 1\n"
        "print(f'got {n}', flush=True)\n"
    )
    job = work([sys.executable, "-c", script], memory_mib=64)
    host_settings = settings(tmp_path, cgroups=HOST)
    spec = build_spec(job, tmp_path / "log", host_settings)
    backend = backend_for("host", host_settings)
    launched = backend.start(spec)
    try:
        assert launched.spec.cgroup is not None
        deadline = time.monotonic() + 20
        while b"ready" not in spec.log_path.read_bytes() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert launched.pid in cgroups.members(launched.spec.cgroup)
        backend.signal(launched, signal.SIGRTMIN)
        os.kill(launched.pid, signal.SIGUSR2)  # after every copy of the signal was queued
        assert launched.proc.wait(20) == 0
    finally:
        if launched.proc.poll() is None:
            backend.signal(launched, signal.SIGKILL)
        launched.proc.wait(20)
        backend.cleanup(launched)
    assert b"got 1" in spec.log_path.read_bytes(), spec.log_path.read_bytes()
