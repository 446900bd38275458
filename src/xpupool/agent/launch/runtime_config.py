"""How the agent calls its container runtime on this host: detected at start, or the operator's.

Podman as packaged runs nothing on some hosts until told how, and what it needs follows from the
host, so the agent works it out once (:func:`detect_runtime_config`) and passes it on every call:

- **OCI runtime**: crun cannot start a container on a hybrid cgroup v1/v2 layout (``cgroup2``
  mounted at ``/sys/fs/cgroup/unified`` beside the v1 controllers); runc can. On such a host,
  where podman would use crun and runc is installed: ``podman --runtime runc``.
- **cgroup manager**: the systemd manager needs systemd as PID 1 (``/run/systemd/system``);
  without it, ``--cgroup-manager cgroupfs``.
- **ulimits**: a root podman gives a container ``nofile`` and ``nproc`` of 1048576 unless told
  otherwise, and the OCI runtime's ``setrlimit`` fails ("OCI permission denied") where that is
  above the hard limit podman itself runs under and root cannot raise it (no
  ``CAP_SYS_RESOURCE``, as in the test machines' VMs). So ``--ulimit nofile=H:H`` with the
  agent's own hard limit (podman inherits it), and ``--ulimit nproc=N:N`` with the lower of the
  agent's hard limit and ``kernel.pid_max`` (podman 4.3 was seen running under an ``nproc`` of
  ``pid_max`` below the hard limit it was started with). Docker's daemon has limits of its own,
  not the agent's: nothing is added for it.

The operator's override is a containers.conf file, the way podman itself takes one:
``CONTAINERS_CONF`` in the agent's environment (it reaches every runtime call; see
``CLIENT_ENV_PREFIXES`` in :mod:`.container`). Then the agent detects nothing and adds none of
the above: the file is the whole configuration (podman then reads no other containers.conf), one
format podman documents (containers.conf(5)) for everything it can be told (OCI runtime, cgroup
manager, ulimits, networks, storage), the same for ``xpupool up`` and ``xpupool agent``, and no
copy of podman's options in the agent's flags.
"""

from __future__ import annotations

import os
import resource
import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from xpupool.agent.launch.cgroups import DEFAULT_PIDS_MAX
from xpupool.probes.container_runtime import ContainerRuntime

CgroupLayout = Literal["v2", "hybrid", "v1", "none"]
PODMAN_ROOT_ULIMIT = 1048576  # podman's nofile/nproc for a root container when told nothing
OVERRIDE_ENV = "CONTAINERS_CONF"


@dataclass(frozen=True, slots=True)
class HostFacts:
    """What the configuration follows from. ``*_hard``: the agent's hard limit, None for
    unlimited; ``pid_max``: ``kernel.pid_max``, None when unreadable."""

    cgroup_layout: CgroupLayout
    systemd_booted: bool
    runc_installed: bool
    nofile_hard: int | None
    nproc_hard: int | None
    pid_max: int | None


@dataclass(frozen=True, slots=True)
class RuntimeConfig:
    """The options of every call to ``runtime``: ``global_args`` before the verb (``podman
    --runtime runc kill ...``), ``run_args`` after ``run``; ``notes`` say why, one per setting,
    for the agent's start-up line. ``override``: the operator's containers.conf, which replaced
    detection ("" when none). ``pids_limit``: each container's ``--pids-limit`` (the agent's
    ``--pids-limit``; 0: no limit), whatever the runtime."""

    runtime: str = ""
    global_args: tuple[str, ...] = ()
    run_args: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    override: str = ""
    pids_limit: int = DEFAULT_PIDS_MAX

    def for_runtime(self, name: str) -> RuntimeConfig:
        """The configuration for calls to ``name``: a cluster-file node may declare a runtime
        other than the one detected here, and gets none of its engine options."""
        if name == self.runtime:
            return self
        return RuntimeConfig(runtime=name, pids_limit=self.pids_limit)

    def describe(self) -> str:
        if self.override:
            return f"{OVERRIDE_ENV}={self.override}"
        return "; ".join(self.notes) or "engine defaults"


def cgroup_layout(mounts: str) -> CgroupLayout:
    """The layout ``/proc/self/mounts`` (``mounts``) shows under /sys/fs/cgroup: ``v2`` (cgroup2
    at the root), ``hybrid`` (v1 controllers and a cgroup2 mount beside them), ``v1``, ``none``."""
    v1 = v2_root = v2_beside = False
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) < 3 or not fields[1].startswith("/sys/fs/cgroup"):
            continue
        if fields[2] == "cgroup2":
            if fields[1].rstrip("/") == "/sys/fs/cgroup":
                v2_root = True
            else:
                v2_beside = True
        elif fields[2] == "cgroup":
            v1 = True
    if v2_root:
        return "v2"
    if v1:
        return "hybrid" if v2_beside else "v1"
    return "none"


def plan_runtime_config(
    runtime: ContainerRuntime, facts: HostFacts, override: str = "", pids_limit: int = 0
) -> RuntimeConfig:
    """The configuration for ``runtime`` on a host with ``facts`` (pure: the tests' table)."""
    base = RuntimeConfig(runtime=runtime.name, pids_limit=pids_limit)
    if override or runtime.name != "podman":
        return replace(base, override=override)
    global_args: list[str] = []
    run_args: list[str] = []
    notes: list[str] = []
    if facts.cgroup_layout == "hybrid" and runtime.oci_runtime != "runc":
        if facts.runc_installed:
            global_args += ["--runtime", "runc"]
            notes.append(f"runc (not {runtime.oci_runtime or 'the default'}: hybrid cgroups)")
        else:
            notes.append(
                f"{runtime.oci_runtime or 'default'} OCI runtime on hybrid cgroups; no runc"
            )
    if not facts.systemd_booted:
        global_args += ["--cgroup-manager", "cgroupfs"]
        notes.append("cgroupfs (no systemd)")
    nofile = _below(PODMAN_ROOT_ULIMIT, facts.nofile_hard)
    nproc = _below(PODMAN_ROOT_ULIMIT, facts.nproc_hard, facts.pid_max)
    run_args += ["--ulimit", f"nofile={nofile}:{nofile}", "--ulimit", f"nproc={nproc}:{nproc}"]
    notes.append(f"ulimits nofile={nofile} nproc={nproc}")
    return replace(
        base, global_args=tuple(global_args), run_args=tuple(run_args), notes=tuple(notes)
    )


def _below(ceiling: int, *limits: int | None) -> int:
    return min([ceiling, *(n for n in limits if n is not None and n > 0)])


def _hard(which: int) -> int | None:
    hard = resource.getrlimit(which)[1]
    return None if hard == resource.RLIM_INFINITY else hard


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def host_facts() -> HostFacts:
    """This host's facts, read now."""
    pid_max = _read("/proc/sys/kernel/pid_max").strip()
    return HostFacts(
        cgroup_layout=cgroup_layout(_read("/proc/self/mounts")),
        systemd_booted=Path("/run/systemd/system").is_dir(),
        runc_installed=shutil.which("runc") is not None,
        nofile_hard=_hard(resource.RLIMIT_NOFILE),
        nproc_hard=_hard(resource.RLIMIT_NPROC),
        pid_max=int(pid_max) if pid_max.isdigit() else None,
    )


def detect_runtime_config(runtime: ContainerRuntime, pids_limit: int) -> RuntimeConfig:
    """The configuration for ``runtime`` here: the operator's containers.conf when
    ``CONTAINERS_CONF`` names one, else what this host needs (module docstring)."""
    override = os.environ.get(OVERRIDE_ENV, "")
    return plan_runtime_config(runtime, host_facts(), override, pids_limit)
