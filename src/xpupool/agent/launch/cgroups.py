"""A cgroup for every replica: what holds all its processes, limits its CPU, memory and task
count, and lets the agent kill everything of it at once (v2, else v1).

The agent detects once which hierarchy it may write: cgroup v2 (a unified hierarchy whose root
lists the ``memory`` and ``cpu`` controllers) or v1 (separate ``memory`` and ``cpu`` hierarchies,
as on the cgroup v1 "hybrid" hosts, with ``pids`` and ``freezer`` where mounted). Every replica
gets a cgroup of its own, whatever it asked for, created with its limits before it starts; the
launcher moves itself into it before it switches uid and execs the job, so no instruction of the
job runs outside it (no window between fork and join). A process that leaves the replica's process
group (``setsid``, a double fork) is still in it: when the replica ends, everything in the cgroup is
frozen, killed and waited for before the replica is reported over and its cards freed (issue 43:
a ``setsid`` child of a job that asked for no limit, and so had no cgroup, kept eight cards'
``CUDA_VISIBLE_DEVICES`` while the next tenant got those cards). ``pids.max`` bounds its tasks
(threads included). The cgroup is removed when the replica's processes are gone. There is no
RLIMIT_AS fallback: it caps address space, not memory, and breaks runtimes that reserve large
address ranges (CUDA).

v1 cgroups nest under the agent's own (a limit placed on the agent also bounds its jobs); v2's
rule that a cgroup with processes has no controllers for its children makes that impossible
there, so v2 cgroups live under ``<root>/xpupool``, as runc's cgroupfs driver does.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("xpupool.agent")

CGROUP_ROOT = Path("/sys/fs/cgroup")
PARENT = "xpupool"
CPU_PERIOD_US = 100_000
# Tasks (processes and threads) a replica may have at once unless the operator says otherwise
# (--pids-limit): far above what a training job with data-loader workers uses, far below what
# exhausts a host's pid space.
DEFAULT_PIDS_MAX = 16384
FREEZE_WAIT_S = 1.0


@dataclass(frozen=True, slots=True)
class CgroupPlan:
    """One replica's cgroup(s): where, and which limits (0: none). ``pids_dir`` and
    ``freezer_dir`` are None where that v1 controller is not mounted (v2 has both in its one
    directory)."""

    version: int
    memory_dir: Path
    cpu_dir: Path
    memory_bytes: int
    cpu_quota_us: int
    cpu_period_us: int = CPU_PERIOD_US
    pids_dir: Path | None = None
    freezer_dir: Path | None = None
    pids_max: int = 0

    @property
    def dirs(self) -> tuple[Path, ...]:
        out: list[Path] = []
        for d in (self.memory_dir, self.cpu_dir, self.pids_dir, self.freezer_dir):
            if d is not None and d not in out:
                out.append(d)
        return tuple(out)

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
        if self.pids_max and self.pids_dir is not None:
            parts.append(f"pids={self.pids_max}")
        return "limits: " + " ".join(parts)


@dataclass(frozen=True, slots=True)
class CgroupHost:
    """A writable cgroup hierarchy found on this host; ``plan`` places a replica in it.
    ``pids_max``: each replica's task limit (0: none)."""

    version: int
    memory_base: Path
    cpu_base: Path
    pids_base: Path | None = None
    freezer_base: Path | None = None
    pids_max: int = DEFAULT_PIDS_MAX

    def release(self) -> None:
        """Remove this agent's parent cgroup(s) if no replica is left in them (at exit: a parent
        left behind would keep the agent's own cgroup from being removed by its manager)."""
        for base in {self.memory_base, self.cpu_base, self.pids_base, self.freezer_base}:
            if base is None:
                continue
            with contextlib.suppress(OSError):
                base.rmdir()

    def plan(self, name: str, memory_mib: int, cpu_milli: int) -> CgroupPlan:
        """The plan for a replica named ``name``: always one, limits or not (module docstring)."""
        return CgroupPlan(
            version=self.version,
            memory_dir=self.memory_base / name,
            cpu_dir=self.cpu_base / name,
            memory_bytes=max(memory_mib, 0) << 20,
            cpu_quota_us=max(cpu_milli, 0) * CPU_PERIOD_US // 1000,
            pids_dir=self.pids_base / name if self.pids_base is not None else None,
            freezer_dir=self.freezer_base / name if self.freezer_base is not None else None,
            pids_max=max(self.pids_max, 0),
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
    if not controllers.is_file():
        return None
    present = set(controllers.read_text().split())
    if not {"memory", "cpu"} <= present:
        return None
    wanted = ("memory", "cpu", "pids") if "pids" in present else ("memory", "cpu")
    base = root / PARENT
    _enable(root, wanted)
    _mkdir(base)
    _enable(base, wanted)
    # cgroup.freeze exists in every non-root v2 cgroup: the freezer needs no controller
    return CgroupHost(2, base, base, base if "pids" in wanted else None, base)


def _enable(cgroup: Path, wanted: tuple[str, ...] = ("memory", "cpu")) -> None:
    control = cgroup / "cgroup.subtree_control"
    if set(wanted) <= set(_read(control).split()):
        return
    control.write_text(" ".join(f"+{c}" for c in wanted))


def _detect_v1(root: Path, self_cgroup: str) -> CgroupHost | None:
    bases: dict[str, Path] = {}
    for controller, probe in (("memory", "memory.limit_in_bytes"), ("cpu", "cpu.cfs_quota_us")):
        hierarchy = root / controller
        if not (hierarchy / probe).is_file():
            return None
        base = hierarchy / _own_path(self_cgroup, controller).lstrip("/") / PARENT
        _mkdir(base)
        if not os.access(base, os.W_OK):
            return None
        bases[controller] = base
    # pids and freezer are optional (a replica is then held by the others); their files exist
    # only below the root, so they are looked for in the agent's parent once it is made
    for controller, probe in (("pids", "pids.max"), ("freezer", "freezer.state")):
        hierarchy = root / controller
        if not (hierarchy / "cgroup.procs").is_file():
            continue
        base = hierarchy / _own_path(self_cgroup, controller).lstrip("/") / PARENT
        try:
            _mkdir(base)
        except OSError as exc:
            log.info("cgroup v1 %s not usable: %s", controller, exc)
            continue
        if (base / probe).is_file() and os.access(base, os.W_OK):
            bases[controller] = base
    return CgroupHost(1, bases["memory"], bases["cpu"], bases.get("pids"), bases.get("freezer"))


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
    if plan.pids_max and plan.pids_dir is not None:
        (plan.pids_dir / "pids.max").write_text(str(plan.pids_max))
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


def kill_all(plan: CgroupPlan) -> None:
    """SIGKILL every process of the replica's cgroup, with none able to fork a new one meanwhile:
    v2's ``cgroup.kill`` where the kernel has it; else the cgroup is frozen (``cgroup.freeze``,
    v1's ``freezer.state``), its members killed, and thawed, so that the kills take effect. Without
    a freezer, the members are killed as found (the supervisor repeats until none is left)."""
    if plan.version == 2:
        kill = plan.memory_dir / "cgroup.kill"
        if kill.exists():
            with contextlib.suppress(OSError):
                kill.write_text("1")
                return
    frozen = _freeze(plan, True)
    try:
        for pid in members(plan):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
    finally:
        if frozen:
            _freeze(plan, False)


def _freeze(plan: CgroupPlan, on: bool) -> bool:
    """Freeze (or thaw) the replica's cgroup; True once frozen (waits up to FREEZE_WAIT_S)."""
    d = plan.freezer_dir
    if d is None:
        return False
    if plan.version == 2:
        control, value, done = d / "cgroup.freeze", "1" if on else "0", d / "cgroup.events"
    else:
        control = done = d / "freezer.state"  # read back: FREEZING becomes FROZEN
        value = "FROZEN" if on else "THAWED"
    try:
        control.write_text(value)
    except OSError as exc:
        log.debug("cgroup %s: cannot write %s: %s", d, control.name, exc)
        return False
    if not on:
        return False
    deadline = time.monotonic() + FREEZE_WAIT_S
    while time.monotonic() < deadline:
        text = _read(done)
        if ("frozen 1" in text) if plan.version == 2 else (text.strip() == "FROZEN"):
            return True
        time.sleep(0.005)
    return True  # partly frozen still slows a forking replica; the kill loop finishes it


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
