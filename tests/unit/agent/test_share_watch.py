"""Watch and stop (agent/share_watch.py) and the cgroup mapping of processes to replicas
(agent/monitor.py), with a clock moved by hand and /proc/PID/cgroup texts written here."""

from __future__ import annotations

from agent_work import device, work

from xpupool.agent.monitor import Monitor, container_of_cgroup, replica_of_cgroup
from xpupool.agent.share_watch import ShareWatch


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def granted(mib: int) -> object:
    grant = device(0, memory_mib=mib)
    grant.uuid = "GPU-0"
    return work(["x"], devices=[grant])


def test_over_the_share_past_the_tolerance_for_the_grace_is_stopped() -> None:
    clock = Clock()
    watch = ShareWatch(tolerance=0.05, grace_s=30.0, clock=clock)
    w = granted(20480)
    assert watch.check((7, 0), w, {"GPU-0": 32768}) == ""  # over: the grace starts
    clock.now += 29
    assert watch.check((7, 0), w, {"GPU-0": 32768}) == ""
    clock.now += 2
    why = watch.check((7, 0), w, {"GPU-0": 32768})
    assert why.startswith("used 32.0 GiB of its 20 GiB share on card GPU-0, for 31 s")


def test_within_the_share_or_the_tolerance_is_never_touched() -> None:
    clock = Clock()
    watch = ShareWatch(tolerance=0.05, grace_s=0.0, clock=clock)
    w = granted(20480)
    assert watch.check((7, 0), w, {"GPU-0": 20480}) == ""
    assert watch.check((7, 0), w, {"GPU-0": 21500}) == ""  # under 5 % over
    assert watch.check((7, 0), w, {"GPU-0": 21600}) != ""


def test_a_pass_back_under_the_share_starts_the_grace_again() -> None:
    clock = Clock()
    watch = ShareWatch(tolerance=0.0, grace_s=10.0, clock=clock)
    w = granted(1024)
    watch.check((7, 0), w, {"GPU-0": 4096})
    clock.now += 8
    assert watch.check((7, 0), w, {"GPU-0": 512}) == ""  # a peak, over
    clock.now += 8
    assert watch.check((7, 0), w, {"GPU-0": 4096}) == ""
    clock.now += 11
    assert watch.check((7, 0), w, {"GPU-0": 4096}) != ""
    watch.keep([(8, 0)])  # (7, 0) ended: a later run of that key starts from nothing
    assert watch.check((7, 0), w, {"GPU-0": 4096}) == ""


def test_a_card_not_granted_is_over_at_any_use() -> None:
    watch = ShareWatch(grace_s=0.0, clock=Clock())
    why = watch.check((7, 0), granted(1024), {"GPU-9": 2048})
    assert why.startswith("used 2.0 GiB on card GPU-9, which it was not granted")


def test_processes_map_to_replicas_by_the_agents_cgroup_names() -> None:
    v2 = "0::/xpupool/n1-7-0-31-0a1b2c3d\n"
    v1 = "12:pids:/xpupool/n1-8-2-40-deadbeef\n4:memory:/user.slice/n1-8-2-40-deadbeef\n"
    assert replica_of_cgroup(v2, "n1") == (7, 0)
    assert replica_of_cgroup(v1, "n1") == (8, 2)
    assert replica_of_cgroup(v2, "n2") is None  # another agent's replica
    assert replica_of_cgroup("0::/user.slice/session-3.scope\n", "n1") is None


def test_replica_usage_takes_the_cgroup_before_the_process_group() -> None:
    cgroups = {11: "0::/xpupool/n1-7-0-31-0a1b2c3d\n", 12: "0::/user.slice\n"}

    def cgroup_of(pid: int) -> str:
        if pid not in cgroups:
            raise FileNotFoundError(pid)
        return cgroups[pid]

    groups = {11: 500, 12: 600, 13: 600}  # pid -> pgid: 11 claims (9, 0)'s group by setpgid
    monitor = Monitor([], pgid_of=lambda pid: groups[pid], cgroup_of=cgroup_of)
    usage = {"GPU-0": {11: 1000, 12: 10, 13: 5}}
    per = monitor.replica_usage({(7, 0): 400, (9, 0): 500, (8, 0): 600}, usage, "n1")
    assert per == {(7, 0): {"GPU-0": 1000}, (9, 0): {}, (8, 0): {"GPU-0": 15}}


def test_processes_map_to_image_replicas_by_the_container_id_in_their_cgroup() -> None:
    cid = "78c0d8f5433481436d92794cf756cead0ddf5828150b093be7c9a1cb4a724ba0"
    known = {cid: (7, 0)}
    cgroupfs = f"9:name=systemd:/libpod_parent/libpod-{cid}\n8:pids:/libpod_parent/libpod-{cid}\n"
    systemd = f"0::/machine.slice/libpod-{cid}.scope/container\n"
    docker = f"0::/system.slice/docker-{cid}.scope\n"
    for text in (cgroupfs, systemd, docker):
        assert container_of_cgroup(text, known) == (7, 0)
    other = "0::/machine.slice/libpod-" + "ab" * 32 + ".scope\n"
    assert container_of_cgroup(other, known) is None  # another container: not ours
    assert container_of_cgroup(f"0::/x/{cid}1\n", known) is None  # not the id, a longer word
    monitor = Monitor([], pgid_of=lambda pid: 1, cgroup_of=lambda pid: systemd)
    per = monitor.replica_usage({(7, 0): 0}, {"GPU-0": {4242: 900}}, "n1", known)
    assert per == {(7, 0): {"GPU-0": 900}}
