"""The ``container`` back end: an image job through docker or podman, from the same launch spec. The
replica's process group is the runtime's client (``docker run``, attached, so its exit code is the
container's and its output goes through the same capped log pipe); the client runs as the agent,
which the engine's socket trusts, and the container runs as the job: ``--user UID:GID`` (the
tenant's uid when the agent switches users, else the agent's own, never the image's root). What the
spec decides becomes runtime flags: the environment through an ``--env-file`` (0600, in the agent's
private log directory, gone at cleanup: nothing in ``ps``), the CPU and memory limits as
``--cpus``/``--memory`` (the runtime's cgroup enforces them, not the agent's), the private working
directory mounted at its own path as the working directory, the cards the vendor's way
(:func:`xpupool.probes.device_nodes.container_device_args`). ``--rm``, ``--init`` (a PID 1 that
forwards signals and reaps) and the name ``xpupool-<run id>`` (node, job, replica, allocation and
the run's random suffix: two pools on one engine can hand out the same job numbers, and one must
never stop or remove the other's container), so stopping goes through the runtime (``kill
--signal``) and cleanup is ``rm -f`` by that name; ``--cidfile`` leaves the container's id next to
its log (the share watch finds the replica of a card's process by it); the labels
``xpupool.node``/``xpupool.job`` find them too, and ``xpupool.owner`` (the agent work directory of
the node that ran it: one agent per work directory on a host) says whose it is: an agent that
starts again removes the containers it owns that no supervisor holds any more
(:meth:`ContainerBackend.remove_leftovers`), and never another pool's or another agent's. Every
call carries the host's runtime configuration (:mod:`.runtime_config`: OCI runtime, cgroup manager,
ulimits) and ``--pids-limit``. The network is the operator's policy (``--network``): ``host``, or
the engine's bridge with the replica's host ports (:mod:`.ports`) published as themselves
(:func:`network_args`). The image is got first, in a step of its own under the job's pull policy
and the agent's pull timeout (:mod:`.container_pull`: its progress in the job's log, a failure
classified as Kubernetes' ErrImagePull), and ``run`` gets ``--pull never``; what the step did heads
the limits line.

The image and the command come after every option and ``--``: nothing of the job's is ever read as
the runtime's option (``--privileged`` as an image was, before the server checked references).
tests/integration/test_container_engine.py and test_container_lifecycle.py run it on a real podman.
"""

from __future__ import annotations

import logging
import os
import signal as signals
import subprocess
from dataclasses import replace
from pathlib import Path

from xpupool.agent.env import as_seen_alone
from xpupool.agent.launch import secret_files
from xpupool.agent.launch.backend import Launched
from xpupool.agent.launch.container_pull import ensure_image
from xpupool.agent.launch.process import (
    ProcessBackend,
    group_alive,
    start_process,
    write_log_line,
)
from xpupool.agent.launch.runtime_config import RuntimeConfig
from xpupool.agent.launch.spec import LaunchError, LaunchSpec, Step, StopAsked, never, no_step
from xpupool.agent.replica_dir import CONTAINER_ID
from xpupool.catalog.image_ref import ImageRefError, parse_image_ref
from xpupool.probes.container_runtime import ContainerRuntime, RuntimeName
from xpupool.probes.device_nodes import container_device_args

log = logging.getLogger("xpupool.agent")

NAME_PREFIX = "xpupool-"
OWNER_LABEL = "xpupool.owner"
RUNTIME_CALL_TIMEOUT_S = 15.0
# What the runtime's client needs from the agent's environment to reach its engine and registry
# (the job's own variables go to the container, never to the client).
CLIENT_ENV = ("PATH", "HOME", "USER", "LANG", "LC_ALL", "XDG_RUNTIME_DIR", "XDG_CONFIG_HOME")
# what a container on the bridge network calls the host (podman adds its own to /etc/hosts;
# docker's is added with --add-host NAME:host-gateway)
HOST_NAMES = {"podman": "host.containers.internal", "docker": "host.docker.internal"}
CLIENT_ENV_PREFIXES = ("DOCKER_", "CONTAINER_", "CONTAINERS_", "REGISTRY_AUTH_FILE")


def container_name(spec: LaunchSpec) -> str:
    return f"{NAME_PREFIX}{spec.slug}"


def owner_of(spec: LaunchSpec) -> str:
    """The agent work directory a run belongs to: its log is ``<work dir>/replicas/<run>/output.log``
    (:mod:`xpupool.agent.replica_dir`)."""
    return str(spec.log_path.parent.parent.parent)


def env_file_path(spec: LaunchSpec) -> Path:
    """Next to the replica's log: the agent's private directory (0700), not the job's."""
    return spec.log_path.with_name(f"{spec.slug}.env")


def container_env(spec: LaunchSpec, network: str = "host", host_name: str = "") -> dict[str, str]:
    """The job's environment as the container gets it: the image keeps its own ``PATH``; device
    indices are as the container numbers its cards (:func:`~xpupool.agent.env.as_seen_alone`).
    On the bridge network the host's loopback is the container's own: a peer address that is
    loopback (a node ``xpupool up`` runs itself, all replicas on this host) becomes
    ``host_name``, the name the runtime gives the host (where the published ports are)."""
    env = as_seen_alone(spec.env, spec.devices)
    env.pop("PATH", None)
    if network == "bridge" and host_name:
        for name in ("MASTER_ADDR", "XPUPOOL_PEERS"):
            if name in env:
                peers = env[name].split(",")
                env[name] = ",".join(host_name if _loopback(p) else p for p in peers)
    return env


def _loopback(address: str) -> bool:
    return address == "localhost" or address.startswith("127.") or address == "::1"


def write_env_file(path: Path, env: dict[str, str]) -> None:
    """``NAME=VALUE`` lines, created 0600 from the first byte. The format has no quoting: a value
    with a newline, or a name a reader would take for a comment or trim, cannot be written and is
    refused (LaunchError naming the variable) rather than passed some other way."""
    lines = []
    for name, value in env.items():
        if "\n" in value or "\r" in value:
            raise LaunchError(
                f"env {name}: a value with a line break cannot be passed to a container"
            )
        if name != name.strip() or name.startswith("#"):
            raise LaunchError(f"env {name!r}: not a variable name a container runtime reads")
        lines.append(f"{name}={value}\n")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.writelines(lines)


def client_env() -> dict[str, str]:
    """The runtime client's environment: what it needs to find its engine, nothing else."""
    return {
        k: v for k, v in os.environ.items() if k in CLIENT_ENV or k.startswith(CLIENT_ENV_PREFIXES)
    }


def limit_args(spec: LaunchSpec) -> list[str]:
    """``--cpus`` (whole CPUs, from millicores) and ``--memory`` (MiB); none for 0 (no limit).
    A replica with several cards and a memory limit also gets ``--shm-size`` of that limit: the
    engines' 64 MiB ``/dev/shm`` is too small for NCCL's and PyTorch's shared-memory transports
    between its cards' processes, and what a tmpfs holds counts against the container's memory
    cgroup anyway, so the limit is the most it could use (``--ipc host`` would share the host's,
    other tenants' included)."""
    args = []
    if spec.cpu_milli:
        args += ["--cpus", f"{spec.cpu_milli / 1000:g}"]
    if spec.memory_mib:
        args += ["--memory", f"{spec.memory_mib}m"]
        if len(spec.devices) > 1:
            args += ["--shm-size", f"{spec.memory_mib}m"]
    return args


def network_args(spec: LaunchSpec, network: str, runtime: str) -> list[str]:
    """``--network host``, or (bridge, the runtime's default network) ``-p PORT:PORT`` for each
    of the replica's ports: the same number inside and out, so the port the job is told is the
    one its peers dial (:mod:`.ports`). A job that names the port its process listens on inside
    the container (a server image's own, e.g. 8000) has its first host port published to that
    one instead. Docker is told the host's name (podman names it ``host.containers.internal``
    itself)."""
    if network == "host":
        return ["--network", "host"]
    args = []
    if runtime == "docker":
        args += ["--add-host", f"{HOST_NAMES['docker']}:host-gateway"]
    for i, port in enumerate(spec.ports):
        inside = spec.container_port if i == 0 and spec.container_port else port
        args += ["-p", f"{port}:{inside}"]
    return args


def pids_args(config: RuntimeConfig) -> list[str]:
    """``--pids-limit``: the agent's task limit (0: none, ``-1`` to both runtimes)."""
    return ["--pids-limit", str(config.pids_limit if config.pids_limit > 0 else -1)]


def describe_limits(spec: LaunchSpec, runtime: str) -> str:
    parts = []
    if spec.memory_mib:
        parts.append(f"memory={spec.memory_mib}Mi")
    if spec.cpu_milli:
        parts.append(f"cpu={spec.cpu_milli}m")
    if not parts:
        return "limits: none asked"
    return f"limits: {runtime} cgroup " + " ".join(parts)


def describe_network(spec: LaunchSpec, network: str) -> str:
    """Appended to the limits line the job's events show: its network and host ports."""
    ports = ",".join(map(str, spec.ports)) or "none"
    return f"; network {network}, ports {ports}"


class ContainerBackend(ProcessBackend):
    name = "container"

    @property
    def runtime(self) -> ContainerRuntime:
        name = self.settings.runtime
        if name not in ("docker", "podman"):
            raise LaunchError("container images need a container runtime; none on this node")
        runtime: RuntimeName = "docker" if name == "docker" else "podman"
        return ContainerRuntime(runtime, "", self.settings.runtime_cdi)

    @property
    def config(self) -> RuntimeConfig:
        return self.settings.runtime_config.for_runtime(self.runtime.name)

    def argv(self, spec: LaunchSpec) -> list[str]:
        """``<runtime> run ...`` for ``spec`` (reads nothing but the spec and the settings)."""
        runtime = self.runtime
        if not spec.image:
            raise LaunchError("the container back end runs images; this job has none")
        try:  # the server checks this at submission; a job stored before it did is checked here
            parse_image_ref(spec.image)
        except ImageRefError as exc:
            why = f"image {spec.image[:80]!r} is not an image reference: {exc.reason}"
            raise LaunchError(why) from None
        uid = os.geteuid() if spec.uid is None else spec.uid
        gid = os.getegid() if spec.gid is None else spec.gid
        workdir = str(spec.workdir)
        config = self.config
        # the image is the pull step's (.container_pull): run never pulls behind its back
        argv = [runtime.name, *config.global_args, "run", "--rm", "--init", "--pull=never"]
        argv += ["--name", container_name(spec), *config.run_args]
        # the id its cgroup path carries: the share watch maps a card's process to the replica
        argv += ["--cidfile", str(spec.log_path.with_name(CONTAINER_ID))]
        argv += ["--user", f"{uid}:{gid}", "--env-file", str(env_file_path(spec))]
        argv += ["--security-opt", "no-new-privileges"]
        argv += ["--label", f"xpupool.node={spec.node}", "--label", f"xpupool.job={spec.job_id}"]
        argv += ["--label", f"{OWNER_LABEL}={owner_of(spec)}"]
        argv += ["-v", f"{workdir}:{workdir}", "--workdir", workdir]
        for host, target, read_only in spec.volumes:  # its volumes (volume_mounts.py)
            argv += ["-v", f"{host}:{target}" + (":ro" if read_only else "")]
        if spec.secrets_dir:  # its secrets (secret_files.py), read-only where the job looks
            argv += ["-v", f"{spec.secrets_dir}:{secret_files.CONTAINER_DIR}:ro"]
            if spec.secret_env:
                argv += ["--env-file", str(secret_files.env_file_path(spec))]
        if spec.preload:  # HAMi-core (.hami_core), at the path LD_PRELOAD names, read-only
            argv += ["-v", f"{spec.preload}:{spec.preload}:ro"]
        argv += limit_args(spec) + pids_args(config)
        argv += network_args(spec, spec.network or self.settings.network, runtime.name)
        argv += container_device_args(spec.devices, runtime, self.settings.device_root)
        # every option first, then '--': nothing of the job's (image, command) is an option
        return [*argv, "--", spec.image, *spec.argv]

    def start(
        self, spec: LaunchSpec, stop_asked: StopAsked = never, step: Step = no_step
    ) -> Launched:
        argv = self.argv(spec)
        path = env_file_path(spec)
        network, runtime = spec.network or self.settings.network, self.runtime.name
        pulled = ensure_image(
            [runtime, *self.config.global_args],
            spec.image or "",
            spec.pull,
            self.settings.pull_timeout_s,
            lambda line: write_log_line(spec.log_path, line),
            client_env(),
            spec.pull_auth,
            stop_asked,
            step,
        )
        write_env_file(path, container_env(spec, network, HOST_NAMES[runtime]))
        if spec.secret_env:
            secret_files.write_env_file(spec, secret_files.secret_env(spec))
        # the client runs as the agent, outside any cgroup of the agent's: the runtime's own
        # cgroup holds the container
        limits = f"{pulled}; " + describe_limits(spec, argv[0]) + spec.device_limits
        limits += describe_network(spec, network)
        client = replace(spec, env=client_env(), limits=limits, cgroup=None)
        try:
            launched = start_process(client, argv, switch_user=False, use_cgroup=False)
        except LaunchError:
            path.unlink(missing_ok=True)
            raise
        launched.handle = container_name(spec)
        return launched

    def _call(self, *args: str) -> subprocess.CompletedProcess[str] | None:
        argv = [self.runtime.name, *self.config.global_args, *args]
        try:
            return subprocess.run(
                argv,
                capture_output=True,
                text=True,
                timeout=RUNTIME_CALL_TIMEOUT_S,
                env=client_env(),
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            log.warning("%s: %s", " ".join(argv), exc)
            return None

    def signal(self, launched: Launched, sig: int) -> None:
        """Through the runtime (``kill --signal``): the container's processes are not the
        agent's children. Nothing to do once the client is gone (the container ended with it,
        or cleanup's ``rm -f`` ends it)."""
        if launched.proc.poll() is not None:
            return
        name = signals.Signals(sig).name.removeprefix("SIG")
        done = self._call("kill", "--signal", name, launched.handle)
        if done is not None and done.returncode != 0:
            log.info("%s kill %s: %s", self.runtime.name, launched.handle, done.stderr.strip())

    def alive(self, launched: Launched) -> bool:
        """The attached client lives as long as its container does."""
        return group_alive(launched.pgid)

    def oom_killed(self, launched: Launched) -> bool:
        return False  # --rm removed the container, and its State.OOMKilled with it

    def cleanup(self, launched: Launched) -> None:
        """``rm -f`` by name (a container whose client died is ended here), then the env file
        and what every back end releases (log pump, working directory). Left not ``cleaned``,
        with its directory in place, while the runtime does not answer: tried again later."""
        done = self._call("rm", "-f", launched.handle)
        gone = done is not None and (
            done.returncode == 0 or "no such container" in done.stderr.lower()
        )
        env_file_path(launched.spec).unlink(missing_ok=True)
        if not gone:
            launched.cleaned = False
            return
        super().cleanup(launched)

    def remove_leftovers(self, owner: Path, keep: set[str]) -> list[str]:
        """Remove the containers labelled as ``owner``'s (an agent work directory) but not named
        in ``keep`` (those of the runs a live supervisor holds): left by a supervisor that died
        with its agent (the client dies with it, the container does not). Returns the names
        removed; none when the runtime cannot be asked (logged)."""
        done = self._call(
            "ps", "-a", "--filter", f"label={OWNER_LABEL}={owner}", "--format", "{{.Names}}"
        )
        if done is None or done.returncode != 0:
            if done is not None:
                log.warning("%s ps: %s", self.runtime.name, done.stderr.strip())
            return []
        removed = []
        for name in done.stdout.split():
            if name in keep or not name.startswith(NAME_PREFIX):
                continue
            gone = self._call("rm", "-f", name)
            if gone is not None and gone.returncode == 0:
                removed.append(name)
        return removed
