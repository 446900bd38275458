"""What a replica sees of the host's shared places: its temp dir, ``/tmp`` and other processes.

Every replica has a temp dir of its own, ``<working dir>/tmp`` (0700, the job's uid; ``TMPDIR``,
``TMP`` and ``TEMP`` name it), removed with the working directory. A root agent also gives each
replica a mount namespace of its own, made by the launcher as root before the uid switch
(:mod:`.process`), in which:

- the temp dir is a **tmpfs** when the replica has a memory limit, as large as that limit: a tmpfs
  page is charged to the memory cgroup of the process that writes it (the replica's), so what the
  job keeps in its temp dir counts against its memory limit, and the tmpfs goes with the
  namespace, when the replica's last process ends. Without a memory limit it stays a directory
  on the job root's disk (RAM nobody bounds would be worse than disk);
- on the ``host`` back end, ``/tmp`` and ``/var/tmp`` are that same temp dir (bound over the
  host's), so nothing a job writes there reaches the host's or another job's, and ``/proc`` is a
  new instance mounted ``hidepid=2``: a job sees only its own uid's processes, not another
  tenant's command lines (``--api-key=...`` in ``ps``) nor the agent's. A new instance keeps its
  own options only from Linux 5.8 on; before that every proc mount of a pid namespace shares one
  superblock, and the option would change the host's ``/proc``: older kernels get no hidepid.
  The ``bwrap`` sandbox has its own ``/proc`` and binds the temp dir at ``/tmp`` itself.

The namespace is a slave of the host's: mounts made on the host later reach the job, nothing the
launcher mounts reaches the host. A non-root agent cannot make one (its jobs run as its own user
anyway, and see its processes whatever ``/proc`` shows): its jobs share the host's ``/tmp`` on the
``host`` back end. Whether a root agent can (a container without ``CAP_SYS_ADMIN`` cannot) is
tried once at start (:func:`check_view`).
"""

from __future__ import annotations

import os
import platform
import re
import secrets
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from xpupool.agent.launch.spec import LaunchError, LaunchSettings, LaunchSpec

HIDEPID_SINCE = (5, 8)  # proc instances with options of their own (Linux 5.8, 2020)


@dataclass(frozen=True, slots=True)
class View:
    """One replica's mount namespace. ``workdir``: its working directory (the temp dir is its
    ``tmp``); ``tmpfs_bytes`` > 0: the temp dir is a tmpfs of that size; ``private_tmp``: bind it
    over ``/tmp`` and ``/var/tmp``; ``hide_processes``: a ``/proc`` of its own with
    ``hidepid=2``."""

    workdir: Path
    tmpfs_bytes: int = 0
    private_tmp: bool = False
    hide_processes: bool = False

    def launcher_arg(self) -> str:
        """The launcher's form: ``WORKDIR\\nTMPFS_BYTES\\nFLAGS`` (``t``: private /tmp, ``p``:
        hidden processes)."""
        flags = ("t" if self.private_tmp else "") + ("p" if self.hide_processes else "")
        return f"{self.workdir}\n{max(self.tmpfs_bytes, 0)}\n{flags}"


def view_for(spec: LaunchSpec, settings: LaunchSettings, *, sandboxed: bool) -> View | None:
    """The namespace a replica of ``spec`` runs in; None: the agent's (no private view here,
    or nothing to make: a sandboxed replica without a tmpfs, bwrap does the rest)."""
    if not settings.private_view:
        return None
    if sandboxed:
        return View(spec.workdir, spec.tmpfs_bytes) if spec.tmpfs_bytes > 0 else None
    return View(spec.workdir, spec.tmpfs_bytes, True, settings.hide_processes)


def hidepid_supported(release: str | None = None) -> bool:
    """True when this kernel gives a new proc mount options of its own (see the module)."""
    text = platform.release() if release is None else release
    found = re.match(r"(\d+)\.(\d+)", text)  # "6.18.44-fc", "5.8-rc1", "4.19.0-25-amd64"
    if found is None:
        return False
    return (int(found[1]), int(found[2])) >= HIDEPID_SINCE


def check_view(job_root: Path, hide_processes: bool, timeout_s: float = 10.0) -> str | None:
    """Make one throwaway replica's namespace (a tmpfs temp dir, the private /tmp, and the hidden
    processes when asked) around ``true``, as the agent starts. None when that works; else the
    launcher's own words, so the agent can say why its jobs share /tmp."""
    from xpupool.agent.launch.process import LAUNCHER_ENV, environment_file, launch_argv
    from xpupool.agent.launch.workdir import ensure_job_root

    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        return "only a root agent on Linux can give a job a mount namespace of its own"
    try:
        ensure_job_root(job_root, for_other_uids=False)
        probe = job_root / f".view-check-{secrets.token_hex(4)}"
        (probe / "tmp").mkdir(mode=0o700, parents=True)
    except (OSError, LaunchError) as exc:
        return f"cannot try it under {job_root}: {exc}"
    view = View(probe, 1 << 20, private_tmp=True, hide_processes=hide_processes)
    env_fd = environment_file({})
    try:
        argv = launch_argv(["true"], env_fd=env_fd, view=view)
        done = subprocess.run(
            argv,
            env=dict(LAUNCHER_ENV),
            pass_fds=(env_fd,),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
            cwd=probe,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return str(exc)
    finally:
        os.close(env_fd)
        shutil.rmtree(probe, ignore_errors=True)
    if done.returncode != 0:
        said = done.stderr.strip().splitlines()
        return said[-1] if said else f"exit code {done.returncode}"
    return None
