"""The command-line options that shape how jobs are launched, shared by ``xpupool agent`` and
``xpupool up`` (one definition, so the two cannot drift), and the settings they make."""

from __future__ import annotations

import logging
import os
import platform
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from xpupool.agent.launch.cgroups import DEFAULT_PIDS_MAX
from xpupool.agent.launch.identity import DEFAULT_UID_RANGE
from xpupool.agent.launch.ports import DEFAULT_PORTS, NETWORKS
from xpupool.agent.launch.spec import DEFAULT_PULL_TIMEOUT_S
from xpupool.disk_reserve import DEFAULT_LOG_RESERVE
from xpupool.probes.container_runtime import RUNTIME_CHOICES, RuntimeChoice

if TYPE_CHECKING:
    from xpupool.agent.launch.cgroups import CgroupHost
    from xpupool.agent.launch.spec import LaunchSettings

F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_LOG_CAP = "64Mi"

log = logging.getLogger("xpupool.agent")


def launch_options(f: F) -> F:
    """``--job-uid-range``, ``--job-root``, ``--log-cap``, ``--log-reserve``, ``--pids-limit``,
    ``--sandbox``, ``--runtime``, ``--device-root``, ``--network``, ``--pull-timeout``,
    ``--hami-core``, ``--mps``. (``--ports`` is the standalone agent's only: the server picks a gang's
    master port from the range a node declares, and the nodes of ``xpupool up`` declare none,
    so they keep the default range.)"""
    options = [
        click.option(
            "--job-uid-range",
            default=DEFAULT_UID_RANGE,
            show_default=True,
            help="When run as root: the uids tenants' jobs run as, FIRST-LAST (tenant index i runs"
            " as FIRST+i; no accounts are created). Ignored when not root: jobs then run as this"
            " user.",
        ),
        click.option(
            "--job-root",
            type=click.Path(file_okay=False, resolve_path=True),
            help="Where each replica gets its private working directory (0700, owned by the"
            " job's uid) [default: /var/lib/xpupool-jobs as root, else"
            " $TMPDIR/xpupool-jobs-UID]",
        ),
        click.option(
            "--log-cap",
            default=DEFAULT_LOG_CAP,
            show_default=True,
            help="Most output kept per replica (Mi/Gi): a log keeps its last SIZE, its oldest "
            "bytes dropped (where the filesystem cannot, the rest is discarded after a marker)",
        ),
        click.option(
            "--log-reserve",
            default=DEFAULT_LOG_RESERVE,
            show_default=True,
            metavar="SIZE",
            help="Free space job output never takes on the disk of its logs (Mi/Gi; at most a"
            " quarter of that disk; 0: none): below it output is discarded, with a marker line,"
            " until there is room again, so the store and the agent's own files always have room",
        ),
        click.option(
            "--pids-limit",
            default=DEFAULT_PIDS_MAX,
            show_default=True,
            type=click.IntRange(0),
            help="Most tasks (processes and threads) one replica may have at once, through its"
            " cgroup's pids.max, or its container's --pids-limit (0: no limit)",
        ),
        click.option(
            "--sandbox",
            type=click.Choice(["none", "bwrap"]),
            default="none",
            show_default=True,
            help="bwrap: run each command job in a bubblewrap sandbox (the system read-only, its"
            " own directory, a private /tmp and /proc, only its own device nodes; the data dir"
            " and other jobs hidden). Needs bwrap (Debian: bubblewrap); checked at start.",
        ),
        click.option(
            "--runtime",
            type=click.Choice(list(RUNTIME_CHOICES)),
            default="auto",
            show_default=True,
            help="Container runtime for --image jobs, found by asking it (docker info, podman"
            " info), not by its binary; auto: docker, then podman; none: no image jobs here.",
        ),
        click.option(
            "--device-root",
            type=click.Path(exists=True, file_okay=False, resolve_path=True),
            default="/dev",
            show_default=True,
            help="Where the host's device nodes are (an agent in a container may see them"
            " elsewhere); the sandbox and containers get the granted ones from here.",
        ),
        click.option(
            "--network",
            type=click.Choice(list(NETWORKS)),
            default="bridge",
            show_default=True,
            help="The network of image replicas: bridge (the runtime's own, each replica's"
            " ports published on the host) or host (the host's network: what NCCL and RDMA"
            " usually need; the job then also reaches the host's loopback, the server and this"
            " agent's metrics).",
        ),
        click.option(
            "--allow-network",
            "allow_network",
            multiple=True,
            type=click.Choice(list(NETWORKS)),
            help="A network a queue may ask for its jobs' image replicas besides --network"
            " (repeat; e.g. host, for the queues of distributed training); a replica whose"
            " queue asks for another is refused with the reason.",
        ),
        click.option(
            "--pull-timeout",
            default=DEFAULT_PULL_TIMEOUT_S,
            show_default=True,
            type=click.FloatRange(min=1.0),
            metavar="SECONDS",
            help="Most an image job's pull may take; past it the attempt fails"
            " ('ErrImagePull: timed out') and the job's retry policy decides what follows.",
        ),
        click.option(
            "--hami-core",
            type=click.Path(dir_okay=False),
            default=None,
            metavar="PATH",
            help="HAMi-core's libvgpu.so: preloaded into each replica holding a share of an"
            " NVIDIA card, which then enforces its memory and compute limits. Must be a regular"
            " file owned by root, writable by no one else, in directories others cannot write;"
            " checked at start.",
        ),
        click.option(
            "--mps/--no-mps",
            default=False,
            show_default=True,
            help="Run one NVIDIA MPS control daemon per (card, tenant uid, caps) for replicas"
            " holding a share of one card; the agent sets each daemon's caps on its clients'"
            " memory and SMs (set_default_device_pinned_mem_limit,"
            " set_default_active_thread_percentage), which a job's environment can only lower."
            " Needs nvidia-cuda-mps-control on PATH.",
        ),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def launch_settings(
    job_uid_range: str,
    job_root: str | None,
    log_cap: str,
    sandbox: str = "none",
    runtime: RuntimeChoice = "none",
    device_root: str = "/dev",
    private_paths: tuple[Path, ...] = (),
    pids_limit: int | None = None,
    log_reserve: str = DEFAULT_LOG_RESERVE,
    network: str = "bridge",
    ports: str = DEFAULT_PORTS,
    pull_timeout: float = DEFAULT_PULL_TIMEOUT_S,
    allow_network: tuple[str, ...] = (),
    hami_core: str | None = None,
    mps: bool = False,
) -> LaunchSettings:
    """The :class:`LaunchSettings` for these option values; cgroups are detected here (once per
    agent), the container runtime asked and bwrap tried (:func:`isolation`). Raises
    click.BadParameter naming the option. ``private_paths``: what the sandbox hides (data dir,
    work dir, token file)."""
    from xpupool.agent.launch.cgroups import detect_cgroups
    from xpupool.agent.launch.identity import UidRange
    from xpupool.agent.launch.ports import PortRange
    from xpupool.agent.launch.runtime_config import RuntimeConfig
    from xpupool.agent.launch.spec import DEFAULT_PATH, LaunchSettings, default_job_root
    from xpupool.model.errors import XpupoolError
    from xpupool.model.quantity import parse_memory_mib

    try:
        uid_range = UidRange.parse(job_uid_range)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--job-uid-range") from None
    try:
        cap_mib = parse_memory_mib("--log-cap", log_cap)
    except XpupoolError as exc:
        raise click.BadParameter(str(exc), param_hint="--log-cap") from None
    if cap_mib <= 0:
        raise click.BadParameter(f"{log_cap!r}: must be more than 0", param_hint="--log-cap")
    try:
        reserve_mib = parse_memory_mib("--log-reserve", log_reserve)
    except XpupoolError as exc:
        raise click.BadParameter(str(exc), param_hint="--log-reserve") from None
    if reserve_mib < 0:
        raise click.BadParameter(f"{log_reserve!r}: must be 0 or more", param_hint="--log-reserve")
    try:
        port_range = PortRange.parse(ports)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--ports") from None
    from xpupool.agent.launch.hami_core import check_library

    try:
        preload = check_library(hami_core) if hami_core else None
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--hami-core") from None
    root = Path(job_root).resolve() if job_root else default_job_root()
    for private in private_paths:
        if root == private.resolve() or private.resolve() in root.parents:
            raise click.BadParameter(
                f"{root} is inside {private}, which holds the agent's own files: jobs would run"
                " next to them",
                param_hint="--job-root",
            )
    settings = LaunchSettings(
        job_root=root,
        uid_range=uid_range if os.geteuid() == 0 else None,
        log_cap_bytes=cap_mib << 20,
        log_reserve_bytes=reserve_mib << 20,
        cgroups=_with_pids_limit(detect_cgroups(), pids_limit),
        base_path=os.environ.get("PATH") or DEFAULT_PATH,
        lang=os.environ.get("LANG") or "C.UTF-8",
        device_root=Path(device_root).resolve(),
        private_paths=tuple(p.resolve() for p in private_paths),
        runtime_config=RuntimeConfig(
            pids_limit=DEFAULT_PIDS_MAX if pids_limit is None else pids_limit
        ),
        network=network,
        allowed_networks=tuple(sorted({network, *allow_network})),
        ports=port_range,
        pull_timeout_s=pull_timeout,
        hami_core=preload,
        mps=mps,
    )
    return isolation(settings, sandbox, runtime)


def _with_pids_limit(host: CgroupHost | None, pids_limit: int | None) -> CgroupHost | None:
    """The detected hierarchy with the operator's task limit (None: the default)."""
    if host is None or pids_limit is None:
        return host
    from dataclasses import replace

    return replace(host, pids_max=pids_limit)


def isolation(settings: LaunchSettings, sandbox: str, runtime: RuntimeChoice) -> LaunchSettings:
    """``settings`` with the sandbox and the container runtime that really work here.

    ``--sandbox bwrap`` runs one trivial sandbox now, so that a host where bwrap cannot create
    its namespaces fails at start with bwrap's own words, not on every job. A root agent makes
    one replica's mount namespace (:func:`~xpupool.agent.launch.view.check_view`): where it
    cannot (no ``CAP_SYS_ADMIN`` in a container), jobs share the host's /tmp and see its
    processes, and a warning says why. The runtime is asked
    (``docker info``/``podman info``): ``auto`` settles for none with a log line saying why; an
    explicit ``docker``/``podman`` that does not answer is an error (the operator asked for it).
    The one that answers is configured for this host (:mod:`.runtime_config`).
    """
    from dataclasses import replace

    from xpupool.agent.launch.bwrap import check_bwrap
    from xpupool.agent.launch.runtime_config import detect_runtime_config
    from xpupool.agent.launch.spec import LaunchError
    from xpupool.agent.launch.view import check_view, hidepid_supported
    from xpupool.probes.container_runtime import detect_runtime

    if sandbox == "bwrap":
        try:
            first = settings.uid_range.first if settings.uid_range is not None else None
            check_bwrap(as_uid=first)
        except LaunchError as exc:
            raise click.BadParameter(exc.reason, param_hint="--sandbox") from None
    private = hide = False
    if os.geteuid() == 0:
        hide = hidepid_supported()
        why = check_view(settings.job_root, hide)
        private = why is None
        if why is not None:
            log.warning("jobs share the host's /tmp and see its processes: %s", why)
        elif not hide and sandbox != "bwrap":
            log.warning(
                "this kernel (%s) cannot hide other processes from a job (Linux 5.8 and later"
                " can): jobs see other tenants' command lines; use --sandbox bwrap",
                platform.release(),
            )
    found = detect_runtime(runtime)
    if found.runtime is None and runtime in ("docker", "podman"):
        raise click.BadParameter(found.describe(), param_hint="--runtime")
    if found.runtime is None and found.refused:
        log.info("no container runtime for image jobs: %s", found.describe())
    name = found.runtime.name if found.runtime is not None else None
    cdi = found.runtime.cdi if found.runtime is not None else False
    config = settings.runtime_config
    if found.runtime is not None:
        config = detect_runtime_config(found.runtime, config.pids_limit)
    return replace(
        settings,
        runtime_config=config,
        sandbox=sandbox,
        runtime=name,
        runtime_cdi=cdi,
        private_view=private,
        hide_processes=hide and private,
    )
