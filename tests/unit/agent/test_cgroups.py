"""CPU and memory limits by cgroups: the version this host has, for real; the other against a fake
cgroupfs tree (a directory laid out as the kernel's, with the module pointed at it)."""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

from agent_work import settings, started, work

from xpupool.agent.launch import cgroups
from xpupool.agent.launch.cgroups import CgroupHost, detect_cgroups
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
    assert host == CgroupHost(2, root / "xpupool", root / "xpupool")
    assert (root / "cgroup.subtree_control").read_text() == "+memory +cpu"  # delegated down
    assert (root / "xpupool" / "cgroup.subtree_control").read_text() == "+memory +cpu"
    plan = host.plan("n1-7-0-1-ab", memory_mib=2048, cpu_milli=1500)
    assert plan is not None
    cgroups.create(plan)
    leaf = root / "xpupool" / "n1-7-0-1-ab"
    assert (leaf / "memory.max").read_text() == str(2048 << 20)
    assert (leaf / "cpu.max").read_text() == "150000 100000"
    assert plan.procs_files == (str(leaf / "cgroup.procs"),)
    assert plan.describe() == "limits: cgroup v2 memory=2048Mi cpu=1500m"
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


def test_no_limit_asked_means_no_cgroup(tmp_path: Path) -> None:
    host = detect_cgroups(_fake_v2(tmp_path / "cgroup"), self_cgroup="0::/\n")
    assert host is not None
    assert host.plan("r", memory_mib=0, cpu_milli=0) is None


def test_a_tree_that_is_not_there_is_not_used(tmp_path: Path) -> None:
    assert detect_cgroups(tmp_path / "nothing", self_cgroup="0::/\n") is None


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
    assert rep.limits == f"limits: cgroup v{plan.version} memory=300Mi cpu=700m"
    deadline = time.monotonic() + 20
    while rep.state == "running" and time.monotonic() < deadline:
        runner.poll()
        time.sleep(0.05)
    assert rep.state == "succeeded"
    assert f"/{plan.memory_dir.name}" in rep.log_path.read_text()
    assert not plan.memory_dir.exists() and not plan.cpu_dir.exists()


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
