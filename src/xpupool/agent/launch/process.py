"""The one start path of every process-based back end (``host``, ``bwrap``; the container back end
uses it for its runtime client): log pipe, working directory, cgroup, uid switch, process group.

Each replica is one process group (a new session) led by a tiny launcher, run by the agent's own
Python before the job's command. In the child, before exec, the launcher: joins the replica's
cgroup(s) (still as the agent's user, who owns them), drops supplementary groups and switches to
the job's gid and uid, then asks the kernel to SIGKILL it when the agent dies
(``PR_SET_PDEATHSIG``, kept across exec; set after the uid switch because a credential change
clears it), and only then execs. A node that is marked lost and whose jobs are requeued therefore
leaves no process behind to run the same job twice. The launcher exits 126 (cannot set up) or 127
(cannot run the command) with the reason in the log.

The launcher runs as root, so nothing of the job may reach it before the uid switch: a job's
``LD_PRELOAD``, ``GCONV_PATH`` or ``MALLOC_*`` would otherwise run code or change libc as root
(issue 43). It therefore starts with :data:`LAUNCHER_ENV`, which the agent builds, and refuses to
go on when its environment holds anything else; the command's own environment (the job's, or the
runtime client's for the container back end) travels in a sealed memory file and is applied only
by the final ``execve``, after the switch. ``-I -S`` keeps PYTHON* variables from changing it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from xpupool.agent.launch import cgroups
from xpupool.agent.launch.backend import Launched
from xpupool.agent.launch.logpipe import LogPump, open_log
from xpupool.agent.launch.spec import (
    LaunchError,
    LaunchSettings,
    LaunchSpec,
    Step,
    StopAsked,
    never,
    no_step,
)
from xpupool.agent.launch.view import View
from xpupool.agent.launch.workdir import make_workdir, remove_workdir

log = logging.getLogger("xpupool.agent")

# The launcher's own environment: built here, never the job's. LANG names a UTF-8 locale so that
# Python does not coerce the C locale by setting LC_CTYPE itself (PEP 538); LANG and LC_CTYPE are
# all the launcher accepts to find in its environment.
LAUNCHER_ENV: dict[str, str] = {"LANG": "C.UTF-8"}

# Its arguments: the agent's pid, the uid and gid ("" to keep the agent's), the cgroup.procs
# files (newline-separated; the agent names them), the descriptor of the command's environment
# (NUL-separated NAME=VALUE), the replica's mount namespace ("" for none, else
# :meth:`View.launcher_arg`), then the command. Plain strings, not JSON: ``json`` pulls in ``re``,
# which doubled the launcher's start-up. Everything it imports is imported before the uid switch:
# the agent's Python may live where the job's uid cannot read (execvpe imports ``warnings`` lazily).
# The mount flags: MS_NOSUID 2, MS_NODEV 4, MS_NOEXEC 8, MS_BIND 0x1000, MS_REC 0x4000, MS_SLAVE
# 0x80000; CLONE_NEWNS 0x20000. A job root under /tmp is hidden by the private /tmp: the temp dir
# is bound from a descriptor opened before, and the replica's own directory is bound again at its
# path (bwrap does the same for its sandbox), walked down one descriptor at a time without
# following a link: the new /tmp is the job's, and root must create nothing where a link points.
_LAUNCH = """\
import ctypes, os, sys, warnings
ppid, uid, gid, procs, envfd, view = sys.argv[1:7]
if any(name not in ("LANG", "LC_CTYPE") for name in os.environ):
    sys.stderr.write("xpupool: the launcher's environment is not the agent's; refusing to run\\n")
    os._exit(126)
def mount(src, dst, kind, flags, data=""):
    if libc.mount(src.encode(), dst.encode(), kind.encode() or None, flags, data.encode() or None):
        err = ctypes.get_errno()
        raise OSError(err, f"mount {kind or src} on {dst}: {os.strerror(err)}")
def make_view(workdir, size, flags):
    if libc.unshare(0x20000):
        err = ctypes.get_errno()
        raise OSError(err, f"no mount namespace of its own: {os.strerror(err)}")
    mount("none", "/", "", 0x84000)
    tmp = workdir + "/tmp"
    if int(size):
        owner = f",uid={uid},gid={gid}" if uid else ""
        mount("tmpfs", tmp, "tmpfs", 6, f"size={size},mode=0700{owner}")
    if "t" in flags:
        own = os.open(workdir, os.O_PATH | os.O_DIRECTORY)
        mine = os.open(tmp, os.O_PATH | os.O_DIRECTORY)
        for shared in ("/tmp", "/var/tmp"):
            if os.path.isdir(shared) and not os.path.islink(shared):
                mount(f"/proc/self/fd/{mine}", shared, "", 0x5000)
        os.close(mine)
        try:
            there = os.path.samestat(os.stat(workdir), os.fstat(own))
        except OSError:
            there = False
        if not there:
            at = os.open("/", os.O_PATH | os.O_DIRECTORY)
            mask = os.umask(0o066)
            for name in workdir.strip("/").split("/"):
                try:
                    os.mkdir(name, 0o711, dir_fd=at)
                except FileExistsError:
                    pass
                step = os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=at)
                os.close(at)
                at = step
            os.umask(mask)
            mount(f"/proc/self/fd/{own}", f"/proc/self/fd/{at}", "", 0x5000)
            os.close(at)
        os.close(own)
    if "p" in flags:
        mount("proc", "/proc", "proc", 14, "hidepid=2")
    os.chdir(workdir)
libc = ctypes.CDLL(None, use_errno=True)
try:
    chunks = []
    while True:
        chunk = os.read(int(envfd), 1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(int(envfd))
    env = dict(item.split(b"=", 1) for item in b"".join(chunks).split(b"\\0") if item)
    for path in filter(None, procs.split("\\n")):
        with open(path, "w") as f:
            f.write(str(os.getpid()))
    if view:
        make_view(*view.split("\\n"))
    if uid:
        os.setgroups([])
        os.setresgid(int(gid), int(gid), int(gid))
        os.setresuid(int(uid), int(uid), int(uid))
    os.umask(0o077)  # what a job writes is its tenant's alone, wherever it writes it
except (OSError, ValueError) as exc:
    sys.stderr.write(f"xpupool: cannot set up the job's process: {exc}\\n")
    os._exit(126)
try:
    libc.prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL
except Exception:
    pass
if os.getppid() != int(ppid):
    os._exit(137)  # the agent died before the request took effect
try:
    os.execvpe(sys.argv[7], sys.argv[7:], env)
except OSError as exc:
    sys.stderr.write(f"xpupool: cannot run {sys.argv[7]!r}: {exc}\\n")
    os._exit(127)
"""


def launch_argv(
    command: list[str],
    *,
    uid: int | None = None,
    gid: int | None = None,
    procs: tuple[str, ...] = (),
    env_fd: int = -1,
    view: View | None = None,
) -> list[str]:
    """``command`` behind the launcher on Linux, which reads the command's environment from
    ``env_fd`` and makes ``view``, the replica's mount namespace (:mod:`.view`; None: the
    agent's); unchanged elsewhere (no uid switch, no cgroups there: the agent runs jobs as
    itself)."""
    if not sys.platform.startswith("linux"):
        return list(command)
    ids = ("", "") if uid is None else (str(uid), str(uid if gid is None else gid))
    head = [sys.executable, "-I", "-S", "-c", _LAUNCH, str(os.getpid()), *ids, "\n".join(procs)]
    return [*head, str(env_fd), "" if view is None else view.launcher_arg(), *command]


def environment_file(env: Mapping[str, str]) -> int:
    """A sealed-by-position memory file holding ``env`` (NUL-separated ``NAME=VALUE``), read
    from its start by the launcher: nothing on disk, nothing in ``ps``, no size limit of a pipe.
    Raises LaunchError for a name or value the kernel could not pass (the job's own input)."""
    items = []
    for name, value in env.items():
        if "\0" in name or "\0" in value:
            raise LaunchError(f"env {name[:80]!r}: a null byte cannot be passed to a process")
        if not name or "=" in name:
            raise LaunchError(f"env {name[:80]!r}: not a variable name ('=' in it, or empty)")
        items.append(os.fsencode(name) + b"=" + os.fsencode(value))
    fd = os.memfd_create("xpupool-env", os.MFD_CLOEXEC)
    try:
        data = b"\0".join(items)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.lseek(fd, 0, os.SEEK_SET)
    except OSError:
        os.close(fd)
        raise
    return fd


def start_process(
    spec: LaunchSpec,
    argv: list[str],
    *,
    switch_user: bool = True,
    use_cgroup: bool = True,
    view: View | None = None,
) -> Launched:
    """Start ``argv`` for ``spec``: output through a capped log pipe, in the private working
    directory, with the clean environment, in the replica's cgroup and as the job's uid, in
    ``view`` (its own mount namespace, :mod:`.view`; None: the agent's).
    ``switch_user``/``use_cgroup`` False: the caller's runtime does these itself (a container
    runtime's client must run as the agent). Raises :class:`LaunchError`."""
    limits = spec.limits
    plan = spec.cgroup if use_cgroup else None
    try:
        make_workdir(spec)
    except OSError as exc:
        raise LaunchError(f"cannot prepare the working directory {spec.workdir}: {exc}") from None
    if plan is not None:
        try:
            cgroups.create(plan)
        except OSError as exc:
            cgroups.remove(plan)
            plan = None
            limits = f"limits: none (cgroup not created: {exc})"
    uid, gid = (spec.uid, spec.gid) if switch_user else (None, None)
    procs = plan.procs_files if plan is not None else ()
    linux = sys.platform.startswith("linux")
    read_fd, write_fd = os.pipe()
    env_fd = -1
    try:
        if linux:  # the command's environment reaches only its own execve (module docstring)
            env_fd = environment_file(spec.env)
        proc = subprocess.Popen(
            launch_argv(argv, uid=uid, gid=gid, procs=procs, env_fd=env_fd, view=view),
            stdin=subprocess.DEVNULL,
            stdout=write_fd,
            stderr=write_fd,
            env=dict(LAUNCHER_ENV) if linux else dict(spec.env),
            pass_fds=(env_fd,) if linux else (),
            cwd=spec.workdir,
            start_new_session=True,
        )
    except (OSError, ValueError, LaunchError) as exc:  # ValueError: a lone surrogate in argv
        os.close(read_fd)
        if plan is not None:
            cgroups.remove(plan)
        remove_workdir(spec)
        if isinstance(exc, LaunchError):
            raise
        raise LaunchError(f"cannot start {argv[0]!r}: {exc}") from None
    finally:
        os.close(write_fd)
        if env_fd >= 0:
            os.close(env_fd)
    pump = LogPump(
        read_fd,
        spec.log_path,
        spec.log_cap_bytes,
        name=f"log-{spec.slug}",
        reserve_bytes=spec.log_reserve_bytes,
    )
    if plan is None and spec.cgroup is not None and use_cgroup:
        spec = replace(spec, cgroup=None)  # not created: nothing to watch or remove
    return Launched(spec=spec, proc=proc, pump=pump, limits=limits)


def write_log_line(path: Path, text: str) -> None:
    """Append one line of the agent's own to a replica's log (why it did not start)."""
    fd = open_log(path)
    try:
        os.write(fd, f"xpupool: {text}\n".encode())
    finally:
        os.close(fd)


def group_alive(pgid: int) -> bool:
    """True while a live (not zombie) process is in group ``pgid``. Linux reads /proc so that an
    unreaped zombie does not hold a replica open; elsewhere ``killpg(pgid, 0)``."""
    proc = Path("/proc")
    if proc.is_dir():
        for entry in proc.iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rfind(")") + 2 :].split()
            if len(fields) > 2 and fields[0] not in ("Z", "X") and int(fields[2]) == pgid:
                return True
        return False
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _outside_group(pids: list[int], pgid: int) -> list[int]:
    """Those of ``pids`` not in process group ``pgid`` (one that exited meanwhile is left out)."""
    outside = []
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if os.getpgid(pid) != pgid:
                outside.append(pid)
    return outside


def _live(pid: int) -> bool:
    """Not a zombie (a zombie stays listed in its cgroup until reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2 :][:1] not in ("Z", "X")


class ProcessBackend:
    """A back end whose replica is the process group it started; subclasses give ``argv``."""

    name = "process"

    def __init__(self, settings: LaunchSettings) -> None:
        self.settings = settings

    def argv(self, spec: LaunchSpec) -> list[str]:
        raise NotImplementedError

    def start(
        self, spec: LaunchSpec, stop_asked: StopAsked = never, step: Step = no_step
    ) -> Launched:
        return start_process(spec, self.argv(spec))

    def signal(self, launched: Launched, sig: int) -> None:
        """The process group, and every process of the replica's cgroup outside that group
        (SIGKILL: the whole cgroup at once, frozen so that nothing forks meanwhile). Each
        process is sent the signal once: a job counts its SIGUSR1s (a resize, a checkpoint), and
        one sent twice was seen twice. Those outside the group are found before the group's
        signal, so none that leaves the group meanwhile is sent it twice."""
        plan = launched.spec.cgroup
        if plan is not None and sig == signal.SIGKILL:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(launched.pgid, signal.SIGKILL)
            cgroups.kill_all(plan)
            return
        outside = _outside_group(cgroups.members(plan), launched.pgid) if plan is not None else []
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(launched.pgid, signal.Signals(sig))
        for pid in outside:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.Signals(sig))

    def alive(self, launched: Launched) -> bool:
        if group_alive(launched.pgid):
            return True
        plan = launched.spec.cgroup
        return plan is not None and any(_live(pid) for pid in cgroups.members(plan))

    def oom_killed(self, launched: Launched) -> bool:
        plan = launched.spec.cgroup
        return plan is not None and plan.memory_bytes > 0 and cgroups.oom_kills(plan) > 0

    def cleanup(self, launched: Launched) -> None:
        """Let the log pump finish, remove the working directory (once) and the cgroup."""
        if launched.pump is not None:
            launched.pump.join(0.5)
        if not launched.workdir_removed:
            remove_workdir(launched.spec)
            launched.workdir_removed = True
        plan = launched.spec.cgroup
        launched.cleaned = cgroups.remove(plan) if plan is not None else True
