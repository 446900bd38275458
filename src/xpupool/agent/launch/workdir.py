"""Replicas' working directories: private to the job's uid, outside the agent's data.

Layout: ``JOB_ROOT`` (0711, the agent's: anyone may pass through, nobody may list it or add to
it) holds one 0700 directory per replica run, owned by the job's uid, with a private ``tmp``. A
tenant's job can therefore neither list the other runs nor enter them, and nothing of the agent's
(tokens, database, logs) is anywhere below. The directory is scratch: it is removed when the
replica is over (a later job of the same tenant, same uid, must not find its files).
"""

from __future__ import annotations

import logging
import os
import shutil
import stat
from pathlib import Path

from xpupool.agent.launch.spec import LaunchError, LaunchSpec

log = logging.getLogger("xpupool.agent")

ROOT_MODE = 0o711


def ensure_job_root(root: Path, for_other_uids: bool) -> None:
    """Create ``root`` (0711) if missing and check it is safe: owned by the agent, writable by
    nobody else, and, when jobs run as other uids, reachable by them (every ancestor lets others
    pass: a 0700 ancestor such as a home directory would lock the job out of its own directory)."""
    root.mkdir(mode=ROOT_MODE, parents=True, exist_ok=True)
    st = root.stat()
    if st.st_uid != os.geteuid():
        raise LaunchError(f"job root {root} is owned by uid {st.st_uid}, not by the agent")
    if stat.S_IMODE(st.st_mode) != ROOT_MODE:
        os.chmod(root, ROOT_MODE)
    if not for_other_uids:
        return
    for parent in root.resolve().parents:
        if not parent.stat().st_mode & stat.S_IXOTH:
            raise LaunchError(
                f"job root {root}: its parent {parent} does not let other users through"
                " (mode o-x), so jobs running as their own uid could not reach their directory;"
                " choose another --job-root"
            )


def make_workdir(spec: LaunchSpec) -> None:
    """The replica's private directory and its ``tmp``, owned by the job's uid (0700)."""
    ensure_job_root(spec.workdir.parent, spec.uid is not None)
    for d in (spec.workdir, spec.tmpdir):
        d.mkdir(mode=0o700, exist_ok=True)
        os.chmod(d, 0o700)
        if spec.uid is not None:
            os.chown(d, spec.uid, spec.gid if spec.gid is not None else spec.uid)


def remove_workdir(spec: LaunchSpec) -> None:
    """Delete the replica's directory (rmtree does not follow the job's symlinks)."""
    shutil.rmtree(spec.workdir, ignore_errors=True)
    if spec.workdir.exists():
        log.warning("could not remove the working directory %s", spec.workdir)
