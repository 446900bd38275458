"""The ``bwrap`` back end: the job's command inside a bubblewrap sandbox, one per replica.

What the replica sees: the whole system read-only (``--ro-bind / /``); its own working directory
read-write at the same path; its own temp dir at ``/tmp`` (the same as ``$TMPDIR``: a tmpfs
counted against its memory limit where a root agent made one, :mod:`.view`) and a ``/proc`` of a
new pid namespace (its own processes only: no other job's, no agent's environment); a minimal
``/dev`` (bwrap's: null, zero, random, tty, pts, shm) plus only its own cards' nodes
(:mod:`xpupool.probes.device_nodes`).
Covered, so that not even an absolute path reaches them: the agent's private paths (data dir with
the admin token, database and logs; the agent's work dir; its token file) and every other
replica's directory (tmpfs over directories, ``/dev/null`` over files), and container runtimes'
sockets (connecting to one needs no write access to a read-only mount, and it is root on the host).

Everything else is the shared start path's (:func:`~xpupool.agent.launch.process.start_process`):
the launcher joins the cgroup, switches to the job's uid and sets PR_SET_PDEATHSIG, then execs
bwrap, which therefore runs unprivileged (in a user namespace) and keeps no capabilities.
``--die-with-parent`` ends the sandbox with the launcher. No ``--new-session``: the replica already
leads its own session without a terminal (TIOCSTI needs one), and the agent signals its process
group, which a new session would leave. The network is shared: jobs talk to each other and to
storage. Device indices inside: see :func:`xpupool.agent.env.as_seen_alone`.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from dataclasses import replace
from pathlib import Path

from xpupool.agent.env import as_seen_alone
from xpupool.agent.launch.backend import Launched
from xpupool.agent.launch.process import ProcessBackend, start_process
from xpupool.agent.launch.secret_files import with_secret_env
from xpupool.agent.launch.spec import (
    LaunchError,
    LaunchSettings,
    LaunchSpec,
    Step,
    StopAsked,
    never,
    no_step,
)
from xpupool.agent.launch.view import view_for
from xpupool.probes.device_nodes import sandbox_nodes

INSTALL_HINT = "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap)"
# Sockets of container engines: whoever can connect to one is root on the host.
RUNTIME_SOCKETS = (
    Path("/run/docker.sock"),
    Path("/var/run/docker.sock"),
    Path("/run/podman/podman.sock"),
    Path("/run/containerd/containerd.sock"),
)


def find_bwrap() -> str | None:
    """Absolute path of ``bwrap`` on the agent's PATH (the job's clean PATH may not have it)."""
    return shutil.which("bwrap")


def check_bwrap(
    bwrap: str | None = None, as_uid: int | None = None, timeout_s: float = 10.0
) -> str:
    """Run a trivial sandbox once, as the agent starts, so that a host where bwrap cannot create
    its namespaces (no unprivileged user namespaces, an AppArmor or seccomp policy) says so at
    start with bwrap's own words instead of failing every job. ``as_uid``: try it as that uid
    (a root agent's jobs run bwrap as the tenant's uid, which a policy may treat unlike root).
    Returns the path; raises LaunchError."""
    path = bwrap or find_bwrap()
    if path is None:
        raise LaunchError(f"bwrap is not on PATH; {INSTALL_HINT}")
    argv = [path, "--ro-bind", "/", "/", "--proc", "/proc", "--unshare-pid"]
    argv += ["--die-with-parent", "--", "true"]

    def become() -> None:
        if as_uid is not None:
            os.setgroups([])
            os.setresgid(as_uid, as_uid, as_uid)
            os.setresuid(as_uid, as_uid, as_uid)

    try:
        done = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
            cwd="/",
            preexec_fn=become if as_uid is not None else None,  # at start: one thread
        )
    except (OSError, subprocess.SubprocessError) as exc:  # a timeout, a failed uid switch
        raise LaunchError(f"{path} cannot run: {exc}") from None
    if done.returncode != 0:
        detail = done.stderr.strip() or f"exit code {done.returncode}"
        who = f" as uid {as_uid}" if as_uid is not None else ""
        raise LaunchError(f"{path} cannot create its sandbox here{who}: {detail}")
    return path


def _cover(path: Path) -> list[str]:
    """Arguments that hide ``path`` (a directory: an empty tmpfs; anything else: /dev/null)."""
    if path.is_dir():
        return ["--tmpfs", str(path)]
    return ["--ro-bind", "/dev/null", str(path)]


def reachable(path: Path, uid: int, gid: int) -> bool:
    """True when ``uid``/``gid`` (no other groups: the launcher drops them) may pass through every
    directory above ``path``, by mode bits. bwrap runs as the job's uid, so it can neither see
    nor cover a path the job cannot reach, and need not: the kernel already refuses the job."""
    for parent in reversed(path.parents):
        st = parent.stat()
        if st.st_uid == uid:
            bit = stat.S_IXUSR
        elif st.st_gid == gid:
            bit = stat.S_IXGRP
        else:
            bit = stat.S_IXOTH
        if not st.st_mode & bit:
            return False
    return True


def hidden_paths(spec: LaunchSpec, settings: LaunchSettings) -> list[Path]:
    """What the sandbox covers: resolved, without repeats, only what exists and what the job's
    uid could reach at all (:func:`reachable`)."""
    wanted = [*settings.private_paths, spec.workdir.parent, *RUNTIME_SOCKETS]
    out: list[Path] = []
    for p in wanted:
        if not p.exists():
            continue
        real = p.resolve()
        if real in out or real == Path("/"):
            continue
        if spec.uid is not None and not reachable(real, spec.uid, spec.gid or spec.uid):
            continue
        out.append(real)
    return out


def sandbox_argv(spec: LaunchSpec, settings: LaunchSettings, bwrap: str) -> list[str]:
    """The full bwrap command for ``spec`` (order matters: bwrap applies options in turn, so the
    replica's own directory is bound after its parent is covered, and device nodes after /dev)."""
    workdir = str(spec.workdir)
    argv = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    argv += ["--bind", str(spec.tmpdir), "/tmp"]  # its own temp dir (view.py), nobody else's
    for path in hidden_paths(spec, settings):
        argv += _cover(path)
    argv += ["--bind", workdir, workdir]
    if spec.secrets_dir:  # its own secrets (secret_files.py), at their path, read-only
        argv += ["--ro-bind", spec.secrets_dir, spec.secrets_dir]
    for host, target, read_only in spec.volumes:  # its volumes (volume_mounts.py)
        argv += ["--ro-bind" if read_only else "--bind", host, target]
    for node in sandbox_nodes(spec.devices, settings.device_root):
        argv += ["--dev-bind", str(node.host), str(node.target)]
    argv += ["--unshare-pid", "--unshare-ipc", "--die-with-parent", "--chdir", workdir]
    return [*argv, "--", *spec.argv]


class BwrapBackend(ProcessBackend):
    name = "bwrap"

    def __init__(self, settings: LaunchSettings) -> None:
        super().__init__(settings)
        self._bwrap: str | None = None

    def argv(self, spec: LaunchSpec) -> list[str]:
        if spec.image:
            raise LaunchError("container images need a container runtime; none on this node")
        if not spec.argv:
            raise LaunchError("no command to run (and no image)")
        if self._bwrap is None:
            self._bwrap = find_bwrap()
        if self._bwrap is None:
            raise LaunchError(f"--sandbox bwrap: bwrap is not on PATH; {INSTALL_HINT}")
        return sandbox_argv(spec, self.settings, self._bwrap)

    def start(
        self, spec: LaunchSpec, stop_asked: StopAsked = never, step: Step = no_step
    ) -> Launched:
        alone = with_secret_env(replace(spec, env=as_seen_alone(spec.env, spec.devices)))
        view = view_for(alone, self.settings, sandboxed=True)  # its temp dir's tmpfs, if any
        return start_process(alone, self.argv(alone), view=view)
