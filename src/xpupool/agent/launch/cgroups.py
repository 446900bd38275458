"""CPU and memory limits for a replica, enforced by the kernel's cgroups (v2, else v1).

The agent detects once which hierarchy it may write: cgroup v2 (a unified hierarchy whose root
lists the ``memory`` and ``cpu`` controllers) or v1 (separate ``memory`` and ``cpu`` hierarchies,
as on the cgroup v1 "hybrid" hosts). Each replica gets a cgroup of its own, created with its limits
before it starts; the launcher moves itself into it before it switches uid and execs the job, so
no instruction of the job runs outside it (no window between fork and join). The cgroup is removed
when the replica's processes are gone. There is no RLIMIT_AS fallback: it caps address space, not
memory, and breaks runtimes that reserve large address ranges (CUDA).

v1 cgroups nest under the agent's own (a limit placed on the agent also bounds its jobs); v2's
rule that a cgroup with processes has no controllers for its children makes that impossible
there, so v2 cgroups live under ``<root>/xpupool``, as runc's cgroupfs driver does.
"""

from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("xpupool.agent")

CGROUP_ROOT = Path("/sys/fs/cgroup")
PARENT = "xpupool"
CPU_PERIOD_US = 100_000


@dataclass(frozen=True, slots=True)
class CgroupPlan:
    """One replica's cgroup(s): where, and which limits (0: none)."""

    version: int
    memory_dir: Path
    cpu_dir: Path
    memory_bytes: int
    cpu_quota_us: int
    cpu_period_us: int = CPU_PERIOD_US

    @property
    def dirs(self) -> tuple[Path, ...]:
        return (
            (self.memory_dir,)
            if self.memory_dir == self.cpu_dir
            else (
                self.memory_dir,
                self.cpu_dir,
            )
        )

    @property
    def procs_files(self) -> tuple[str, ...]:
        """What the launcher writes its pid to, before it execs the job."""
        return tuple(str(d / "cgroup.procs") for d in self.dirs)

    def describe(self) -> str:
        parts = [f"cgroup v{self.version}"]
        if self.memory_bytes:
            parts.append(f"memory={self.memory_bytes >> 20}Mi")
        if self.cpu_quota_us:
            parts.append(f"cpu={self.cpu_quota_us * 1000 // self.cpu_period_us}m")
        return "limits: " + " ".join(parts)


@dataclass(frozen=True, slots=True)
class CgroupHost:
    """A writable cgroup hierarchy found on this host; ``plan`` places a replica in it."""

    version: int
    memory_base: Path
    cpu_base: Path

    def release(self) -> None:
        """Remove this agent's parent cgroup(s) if no replica is left in them (at exit: a parent
        left behind would keep the agent's own cgroup from being removed by its manager)."""
        for base in {self.memory_base, self.cpu_base}:
            with contextlib.suppress(OSError):
                base.rmdir()

    def plan(self, name: str, memory_mib: int, cpu_milli: int) -> CgroupPlan | None:
        """The plan for a replica named ``name``; None when it asks for no limit."""
        if memory_mib <= 0 and cpu_milli <= 0:
            return None
        return CgroupPlan(
            version=self.version,
            memory_dir=self.memory_base / name,
            cpu_dir=self.cpu_base / name,
            memory_bytes=max(memory_mib, 0) << 20,
            cpu_quota_us=max(cpu_milli, 0) * CPU_PERIOD_US // 1000,
        )


def detect_cgroups(root: Path = CGROUP_ROOT, self_cgroup: str | None = None) -> CgroupHost | None:
    """The hierarchy this agent can place jobs in, or None (not Linux, not writable, controllers
    missing). ``self_cgroup``: the text of /proc/self/cgroup (tests pass a fake tree's)."""
    if self_cgroup is None:
        try:
            self_cgroup = Path("/proc/self/cgroup").read_text()
        except OSError:
            return None
    try:
        return _detect_v2(root) or _detect_v1(root, self_cgroup)
    except OSError as exc:
        log.info("cgroups not usable under %s: %s", root, exc)
        return None


def _detect_v2(root: Path) -> CgroupHost | None:
    controllers = root / "cgroup.controllers"
    if not controllers.is_file() or not {"memory", "cpu"} <= set(controllers.read_text().split()):
        return None
    base = root / PARENT
    _enable(root)
    _mkdir(base)
    _enable(base)
    return CgroupHost(2, base, base)


def _enable(cgroup: Path) -> None:
    control = cgroup / "cgroup.subtree_control"
    if {"memory", "cpu"} <= set(_read(control).split()):
        return
    control.write_text("+memory +cpu")


def _detect_v1(root: Path, self_cgroup: str) -> CgroupHost | None:
    bases = []
    for controller, probe in (("memory", "memory.limit_in_bytes"), ("cpu", "cpu.cfs_quota_us")):
        hierarchy = root / controller
        if not (hierarchy / probe).is_file():
            return None
        own = _own_path(self_cgroup, controller)
        base = hierarchy / own.lstrip("/") / PARENT
        _mkdir(base)
        if not os.access(base, os.W_OK):
            return None
        bases.append(base)
    return CgroupHost(1, bases[0], bases[1])


def _own_path(self_cgroup: str, controller: str) -> str:
    """This process's path in the v1 hierarchy of ``controller`` ("/" when not listed)."""
    for line in self_cgroup.splitlines():
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            return path
    return "/"


def create(plan: CgroupPlan) -> None:
    """Make the replica's cgroup(s) and write the limits; raises OSError. The parent is made
    again when it is gone: another agent in the same cgroup removes it at exit when it is empty
    (:meth:`CgroupHost.release`), and may do so between two of this agent's replicas."""
    for d in plan.dirs:
        for attempt in range(3):
            try:
                if not d.parent.is_dir():
                    _mkdir(d.parent)
                    if plan.version == 2:
                        _enable(d.parent)
                _mkdir(d)
                break
            except FileNotFoundError:  # the parent went between the check and the mkdir
                if attempt == 2:
                    raise
    if plan.version == 2:
        if plan.memory_bytes:
            (plan.memory_dir / "memory.max").write_text(str(plan.memory_bytes))
            swap = plan.memory_dir / "memory.swap.max"
            if swap.exists():
                swap.write_text("0")
        if plan.cpu_quota_us:
            (plan.cpu_dir / "cpu.max").write_text(f"{plan.cpu_quota_us} {plan.cpu_period_us}")
        return
    if plan.memory_bytes:
        (plan.memory_dir / "memory.limit_in_bytes").write_text(str(plan.memory_bytes))
        memsw = plan.memory_dir / "memory.memsw.limit_in_bytes"
        if memsw.exists():  # swap accounting on: the limit covers swap too
            memsw.write_text(str(plan.memory_bytes))
    if plan.cpu_quota_us:
        (plan.cpu_dir / "cpu.cfs_period_us").write_text(str(plan.cpu_period_us))
        (plan.cpu_dir / "cpu.cfs_quota_us").write_text(str(plan.cpu_quota_us))


def oom_kills(plan: CgroupPlan) -> int:
    """How many processes of the replica the kernel killed for going over its memory limit."""
    name = "memory.events" if plan.version == 2 else "memory.oom_control"
    for line in _read(plan.memory_dir / name).splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill" and value.strip().isdigit():
            return int(value)
    return 0


def members(plan: CgroupPlan) -> list[int]:
    """The pids in the replica's cgroup: all its processes, even one that left its process
    group (``setsid``), so none can outlive the replica unseen."""
    pids: set[int] = set()
    for d in plan.dirs:
        pids.update(int(p) for p in _read(d / "cgroup.procs").split() if p.isdigit())
    return sorted(pids)


def remove(plan: CgroupPlan) -> bool:
    """Remove the replica's cgroup(s) once its processes are gone; False if one is still busy
    (called again later)."""
    done = True
    for d in plan.dirs:
        try:
            d.rmdir()
        except FileNotFoundError:
            continue
        except OSError as exc:
            log.debug("cgroup %s not removed yet: %s", d, exc)
            done = False
    return done


def _mkdir(path: Path) -> None:
    """0755 whatever the umask: a job may read its own limits (it cannot write them)."""
    path.mkdir(exist_ok=True)
    os.chmod(path, 0o755)


def _read(path: Path) -> str:
    with contextlib.suppress(OSError):
        return path.read_text()
    return ""
