"""HAMi-core's ``libvgpu.so``, preloaded into replicas that hold a share of an NVIDIA card.

HAMi-core intercepts the CUDA driver API inside the job's own process and enforces the limits
:func:`xpupool.agent.env.hami_limits` already writes (``CUDA_DEVICE_MEMORY_LIMIT_<i>``,
``CUDA_DEVICE_SM_LIMIT``). Without it those variables are advice; with it a share's memory is
refused past its grant at allocation time instead of being stopped afterwards by the share watch.

The library runs inside every tenant's process, so whoever may write it runs code in all of
them: the operator's path must be a regular file owned by root, writable by no one else, in
directories others cannot write, or that carry the sticky bit (``/tmp``: there only an entry's
owner or root may rename or remove it, and every entry on the path must already be root's).
That is the security rule of issue 43, as for the agent's own files.
It is checked once at agent start (a bad path refuses the start with one line) and reaches the
job only through ``LD_PRELOAD`` in the environment the launcher hands to the job's own
``execve``, after the uid switch (:mod:`.process`): the agent itself never loads it. A whole
card is not limited, so a replica holding only whole cards runs without it.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path

from xpupool.agent.env import HAMI_VENDORS
from xpupool.server.schemas.agent_protocol import DeviceAssignment

PRELOAD = "LD_PRELOAD"


def check_library(path: str, owner: int = 0) -> Path:
    """``path`` made absolute, once checked safe to preload into every tenant's jobs; raises
    ValueError with the one line the operator reads. ``owner``: the uid it must belong to
    (root; a test passes its own)."""
    lib = Path(os.path.abspath(path))
    try:
        st = os.lstat(lib)
    except OSError as exc:
        raise ValueError(f"{lib}: {exc.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise ValueError(f"{lib} is not a regular file (a link or a directory is refused)")
    if st.st_uid != owner:
        raise ValueError(f"{lib} is owned by uid {st.st_uid}, not root: chown root it")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise ValueError(
            f"{lib} is writable by group or others (mode {stat.S_IMODE(st.st_mode):o}):"
            " chmod go-w it"
        )
    for parent in lib.parents:
        pst = os.stat(parent)
        if pst.st_uid not in (0, owner):
            raise ValueError(f"{parent} is owned by uid {pst.st_uid}, who could replace {lib.name}")
        if pst.st_mode & stat.S_IWOTH and not pst.st_mode & stat.S_ISVTX:
            raise ValueError(f"{parent} is writable by others: anyone could replace {lib.name}")
    return lib


def holds_share(devices: Sequence[DeviceAssignment]) -> bool:
    """Whether any granted card of a HAMi vendor is a share (less than the card's memory or
    compute), the only case HAMi-core has anything to limit."""
    return any(
        d.vendor in HAMI_VENDORS
        and (0 < d.memory_mib < d.card_memory_mib or 0 < d.core_permille < 1000)
        for d in devices
    )


def preload_env(
    env: Mapping[str, str], lib: Path | None, devices: Sequence[DeviceAssignment]
) -> dict[str, str]:
    """``env`` with ``lib`` first in ``LD_PRELOAD`` (the job's own entries kept after it) when
    the replica holds a share; unchanged otherwise or when no library was given."""
    out = dict(env)
    if lib is None or not holds_share(devices):
        return out
    own = [p for p in out.get(PRELOAD, "").replace(" ", ":").split(":") if p and p != str(lib)]
    out[PRELOAD] = ":".join([str(lib), *own])
    return out


def describe(lib: Path | None, devices: Sequence[DeviceAssignment]) -> str:
    """Appended to the replica's limits event: what limits its device share."""
    if lib is None or not holds_share(devices):
        return ""
    return f"; device share: hami-core {lib}"
