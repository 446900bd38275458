"""The launch specification: everything a back end needs to start one replica, decided in one place.

The agent's other code never starts a process; it builds a :class:`LaunchSpec` with
:func:`build_spec` and hands it to a back end (``host``, ``bwrap``, ``container``). Keeping the
decisions here (which uid, which environment, which directory, which limits) means every back end
enforces the same ones, and a new back end cannot forget one.
"""

from __future__ import annotations

import os
import secrets
import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from xpupool.agent.elastic_size import size_env
from xpupool.agent.env import device_env
from xpupool.agent.launch import hami_core
from xpupool.agent.launch.cgroups import CgroupHost, CgroupPlan
from xpupool.agent.launch.identity import UidRange
from xpupool.agent.launch.ports import DEFAULT_PORTS, PortRange, replica_ports
from xpupool.agent.launch.runtime_config import RuntimeConfig
from xpupool.disk_reserve import DEFAULT_LOG_RESERVE_BYTES
from xpupool.model.progress import PROGRESS_FILE_ENV, PROGRESS_FILE_NAME
from xpupool.model.stopping import CHECKPOINT_FILE_ENV, CHECKPOINT_FILE_NAME
from xpupool.server.schemas.agent_protocol import DeviceAssignment, Work

DEFAULT_LOG_CAP_BYTES = 64 << 20
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
SYSTEM_JOB_ROOT = Path("/var/lib/xpupool-jobs")
DEFAULT_PULL_POLICY = "if-not-present"  # Kubernetes' default (.container_pull)
DEFAULT_PULL_TIMEOUT_S = 600.0


class LaunchError(Exception):
    """A replica could not be started; ``reason`` is what its log and its job say."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class LaunchStoppedError(LaunchError):
    """A stop was asked for while the replica was still being started (its image pulled): the
    start was given up, nothing of the replica runs, and the run ends stopped, not failed."""


StopAsked = Callable[[], bool]  # whether a stop of the replica was asked for since it was given


def never() -> bool:
    """The :data:`StopAsked` of a start that nothing stops (a caller without a supervisor)."""
    return False


Step = Callable[[str], None]
"""What a start with a long step before the replica runs is doing now (``pulling IMAGE: 3 layers
copied``): the supervisor writes it into its status, and the agent reports it to the server, which
records it in the job's events (issue 45: a pull a user can follow)."""


def no_step(text: str) -> None:
    """The :data:`Step` of a start nobody follows (a caller without a supervisor)."""


def default_job_root() -> Path:
    """Where replicas' working directories go unless configured: a system directory for a root
    agent, one per user under the system temp dir otherwise. Never inside the data dir."""
    if os.geteuid() == 0:
        return SYSTEM_JOB_ROOT
    return Path(tempfile.gettempdir()) / f"xpupool-jobs-{os.geteuid()}"


@dataclass(frozen=True, slots=True)
class LaunchSettings:
    """The agent-wide choices a spec is built from (command-line options of ``xpupool agent`` and
    ``xpupool up``). ``uid_range`` None: jobs run as the agent's own user (it is not root).
    ``sandbox``: "none" or "bwrap"; ``runtime``: the container runtime for image jobs, None when
    there is none (the container back end reads it). ``runtime_cdi``: it takes CDI device names
    (``nvidia.com/gpu=UUID``). ``device_root``: where the host's device nodes are (``/dev``; an
    agent in a container may see the host's under another path). ``private_paths``: the agent's
    own files and directories (data dir, work dir, token file) that the bwrap sandbox hides.
    ``log_reserve_bytes``: free space a replica's log leaves on its disk (``disk_reserve.py``).
    ``private_view``: each replica gets a mount namespace of its own (a root agent on Linux,
    tried at start: :mod:`.view`), with its temp dir a tmpfs counted against its memory limit
    and, on the host back end, at ``/tmp``; ``hide_processes``: there, a ``/proc`` that shows
    the job only its own uid's processes (Linux 5.8 and later). ``runtime_config``: how the
    container runtime is called on this host (:mod:`.runtime_config`). ``network``: an image
    replica's network, ``bridge`` (its ports published) or ``host``; ``ports``: the host ports
    image replicas are given (:mod:`.ports`). ``pull_timeout_s``: the most an image's pull may
    take before the attempt fails (:mod:`.container_pull`). ``hami_core``: HAMi-core's
    library, preloaded into replicas holding a share of an NVIDIA card (:mod:`.hami_core`);
    ``mps``: such replicas get an MPS daemon per (card, uid, caps) (:mod:`.mps`, the runner's)."""

    job_root: Path = field(default_factory=default_job_root)
    uid_range: UidRange | None = None
    log_cap_bytes: int = DEFAULT_LOG_CAP_BYTES
    log_reserve_bytes: int = DEFAULT_LOG_RESERVE_BYTES
    cgroups: CgroupHost | None = None
    sandbox: str = "none"
    runtime: str | None = None
    runtime_cdi: bool = False
    device_root: Path = Path("/dev")
    private_paths: tuple[Path, ...] = ()
    base_path: str = DEFAULT_PATH
    lang: str = "C.UTF-8"
    private_view: bool = False
    hide_processes: bool = False
    runtime_config: RuntimeConfig = field(default_factory=RuntimeConfig)
    network: str = "bridge"
    allowed_networks: tuple[str, ...] = ()  # what a queue may ask for besides ``network``
    ports: PortRange = field(default_factory=lambda: PortRange.parse(DEFAULT_PORTS))
    pull_timeout_s: float = DEFAULT_PULL_TIMEOUT_S
    hami_core: Path | None = None
    mps: bool = False

    def describe(self) -> str:
        """One line for the start-up banner: who jobs run as, where, with which limits."""
        who = (
            f"as a uid per tenant from {self.uid_range}"
            if self.uid_range is not None
            else f"as uid {os.geteuid()} (this user)"
        )
        limits = (
            f"cgroup v{self.cgroups.version}" if self.cgroups else "none (cgroups not writable)"
        )
        images = self.runtime or "none (no container runtime)"
        if self.runtime:
            images += f" ({self.runtime_config.for_runtime(self.runtime).describe()})"
            others = [n for n in self.allowed_networks if n != self.network]
            images += f", network {self.network}"
            images += f" (queues may ask for {', '.join(others)})" if others else ""
            images += f", ports {self.ports}"
            images += f", pull timeout {self.pull_timeout_s:g} s"
        return (
            f"{who}, backend {self.backend_name(None)}, images: {images},"
            f" working dirs under {self.job_root}, {self.view_text()},"
            f" CPU/memory limits: {limits}, log cap {self.log_cap_bytes >> 20} MiB"
        )

    def view_text(self) -> str:
        """What a command job sees of /tmp and other processes (:mod:`.view`)."""
        if self.sandbox == "bwrap":
            return "private /tmp and /proc (sandbox)"
        if not self.private_view:
            return "shared /tmp and /proc"
        if not self.hide_processes:
            return "private /tmp, other processes visible (kernel before 5.8)"
        return "private /tmp, only its own processes in /proc"

    def backend_name(self, image: str | None) -> str:
        """The back end for a replica: image jobs go to the container runtime when there is one
        (the host back end refuses them otherwise, with the reason), commands to the sandbox
        when one is configured, else to the host."""
        if image and self.runtime:
            return "container"
        return "bwrap" if self.sandbox == "bwrap" else "host"


@dataclass(frozen=True, slots=True)
class LaunchSpec:
    """One replica, fully decided. ``argv`` empty: an image's default command. ``env`` is the
    complete environment (nothing is inherited). ``uid``/``gid`` None: the agent's own.
    ``workdir`` is private to ``uid`` (0700, owned by it). ``memory_mib``/``cpu_milli`` 0: no
    limit. ``cgroup`` None: no cgroup enforcement here (``limits`` says why). ``tmpfs_bytes``
    > 0: its temp dir (``tmpdir``) is a tmpfs of that size in its own mount namespace, counted
    against its memory limit (:mod:`.view`); 0: a directory on the job root's disk."""

    job_id: int
    replica: int
    allocation_id: int
    node: str
    tenant: str
    argv: tuple[str, ...]
    image: str | None
    env: Mapping[str, str]
    uid: int | None
    gid: int | None
    workdir: Path
    cpu_milli: int
    memory_mib: int
    devices: tuple[DeviceAssignment, ...]
    log_path: Path
    log_cap_bytes: int
    cgroup: CgroupPlan | None
    limits: str = ""  # the job event that says which enforcement applies
    run_id: str = ""  # unique to this run of this replica on this host (see run_id())
    log_reserve_bytes: int = 0  # free space its log leaves on the disk (disk_reserve.py)
    tmpfs_bytes: int = 0
    ports: tuple[int, ...] = ()  # the host ports it is given (image replicas: .ports)
    container_port: int = 0  # the port its image's process listens on (0: ports[0], as itself)
    # its secrets' files (.secret_files; "" = none) and (variable, file name) to fill at start
    secrets_dir: str = ""
    secret_env: tuple[tuple[str, str], ...] = ()
    # its volumes (.volume_mounts): (host directory, mount path, read-only)
    volumes: tuple[tuple[str, str, bool], ...] = ()
    pull: str = DEFAULT_PULL_POLICY  # its image's pull policy (.container_pull)
    network: str = ""  # an image replica's network when its queue asked for one ("": the node's)
    pull_auth: str = ""  # the registry auth file its image is pulled with (.secret_files)
    preload: str = ""  # HAMi-core's library it preloads (.hami_core; "" = none)
    device_limits: str = ""  # what limits its device share, for the limits event

    @property
    def tmpdir(self) -> Path:
        return self.workdir / "tmp"

    @property
    def slug(self) -> str:
        """A name unique to this run of this replica (directories, cgroups, containers)."""
        return self.run_id or f"{self.job_id}-{self.replica}-{self.allocation_id}"


def run_id(node: str, job_id: int, replica: int, allocation_id: int) -> str:
    """Readable, and unique on the host even when two agents (or two servers' in-process agents)
    hand out the same node name and job numbers: a random suffix, so no run ever inherits another's
    directory or cgroup."""
    return f"{node}-{job_id}-{replica}-{allocation_id}-{secrets.token_hex(4)}"


def job_env(
    work: Work, workdir: Path, settings: LaunchSettings, node_vendors: Iterable[str] = ()
) -> dict[str, str]:
    """The clean environment: a minimal base, then the job's own ``env``, then the allocation's
    device variables, which win. Nothing of the agent's or the server's environment is passed.
    ``TMPDIR``, ``TMP`` and ``TEMP`` (each a language's or tool's name for it) are the replica's
    own temp dir."""
    tmp = str(workdir / "tmp")
    env = {
        "PATH": settings.base_path,
        "HOME": str(workdir),
        "LANG": settings.lang,
        "TMPDIR": tmp,
        "TMP": tmp,
        "TEMP": tmp,
    }
    env.update(work.env)
    a = work.assignment
    env.update(device_env(work.job_id, work.replica, a.node, a.devices, node_vendors).variables)
    env[CHECKPOINT_FILE_ENV] = str(workdir / CHECKPOINT_FILE_NAME)  # docs/jobs.md, Stopping well
    env[PROGRESS_FILE_ENV] = str(workdir / PROGRESS_FILE_NAME)  # model/progress.py (issue 55)
    env.update(size_env(work.elastic, workdir))  # an elastic job's size (agent/elastic_size.py)
    return env


def build_spec(
    work: Work,
    log_path: Path,
    settings: LaunchSettings,
    node_vendors: Iterable[str] = (),
    held_ports: Iterable[int] = (),
) -> LaunchSpec:
    """The spec for ``work``; raises :class:`LaunchError` when it cannot run here (no uid left
    in the range for its tenant, no port left for an image replica: ``held_ports`` are those of
    this agent's live replicas). Its log keeps at most this agent's cap, or the job's own
    (the tenant's, sent by the server) where that is lower. An image replica is told its port
    as ``PORT`` and ``XPUPOOL_PORTS``."""
    a = work.assignment
    uid = gid = None
    if settings.uid_range is not None:
        if work.tenant_index is None:
            raise LaunchError(
                "the server sent no tenant index (an older server?): refusing to run the job"
                " under a uid another tenant may share"
            )
        uid = gid = settings.uid_range.uid_for(work.tenant_index)
        if uid is None:
            raise LaunchError(
                f"tenant {work.tenant!r} (index {work.tenant_index}) has no uid in the job uid"
                f" range {settings.uid_range}; widen --job-uid-range"
            )
    slug = run_id(a.node, work.job_id, work.replica, a.allocation_id)
    workdir = settings.job_root / slug
    cgroup = None
    if settings.cgroups is not None:
        cgroup = settings.cgroups.plan(slug, a.memory_mib, a.cpu_milli)
    limits = describe_limits(cgroup, a.memory_mib, a.cpu_milli)
    # its temp dir counts against its memory limit where the agent can make it a tmpfs (view.py)
    tmpfs_bytes = max(a.memory_mib, 0) << 20 if settings.private_view else 0
    env = hami_core.preload_env(
        job_env(work, workdir, settings, node_vendors), settings.hami_core, a.devices
    )
    device_limits = hami_core.describe(settings.hami_core, a.devices)
    ports: tuple[int, ...] = ()
    network = ""
    container_port = 0
    image = settings.backend_name(work.image) == "container"
    if image:
        if work.network and work.network != settings.network:
            allowed = settings.allowed_networks or (settings.network,)
            if work.network not in allowed:
                raise LaunchError(
                    f"its queue asks for the {work.network} network; this node allows only"
                    f" {', '.join(allowed)} (xpupool agent --allow-network {work.network})"
                )
            network = work.network
        container_port = work.port or 0
        if container_port and (network or settings.network) == "host":
            raise LaunchError(
                f"its process listens on port {container_port} inside its container, but this"
                " node runs images on the host's network, where it must listen on $PORT (the"
                " port the agent picks): give the job port 0"
            )
    if image or work.port is not None:
        try:
            ports = replica_ports(env, settings.ports, held_ports)
        except ValueError as exc:
            raise LaunchError(str(exc)) from None
        env["PORT"] = str(container_port or ports[0])
        env["XPUPOOL_PORTS"] = ",".join(map(str, ports))
    return LaunchSpec(
        job_id=work.job_id,
        replica=work.replica,
        allocation_id=a.allocation_id,
        node=a.node,
        tenant=work.tenant,
        argv=tuple(work.command),
        image=work.image,
        pull=work.pull or DEFAULT_PULL_POLICY,
        network=network,
        env=env,
        uid=uid,
        gid=gid,
        workdir=workdir,
        cpu_milli=a.cpu_milli,
        memory_mib=a.memory_mib,
        devices=tuple(a.devices),
        log_path=log_path,
        log_cap_bytes=min(settings.log_cap_bytes, work.log_cap_bytes or settings.log_cap_bytes),
        cgroup=cgroup,
        limits=limits + device_limits,
        run_id=slug,
        log_reserve_bytes=settings.log_reserve_bytes,
        tmpfs_bytes=tmpfs_bytes,
        ports=ports,
        container_port=container_port,
        preload=str(settings.hami_core) if device_limits else "",
        device_limits=device_limits,
    )


def describe_limits(plan: CgroupPlan | None, memory_mib: int, cpu_milli: int) -> str:
    """The event text: which enforcement applies to this replica's CPU and memory."""
    if plan is not None:
        return plan.describe()
    if not memory_mib and not cpu_milli:
        return "limits: none asked"
    return "limits: none (cgroups not writable)"
