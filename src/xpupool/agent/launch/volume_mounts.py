"""A replica's volumes (docs/agent.md#volumes): the directory each mount binds, made safe before
any back end sees it.

The volume's path is the admin's (resolved as given). A per-tenant volume's directory,
``PATH/<tenant>``, is the tenant's: the agent opens it under the volume's directory without
following a link (``openat`` with ``O_NOFOLLOW``, never a string prefix check), creates it 0700 for
the job's uid when it is missing, and refuses one that is a link, not a directory, or another
uid's. It also refuses a per-tenant volume whose directory others may write: one of them could
swap a tenant's directory for a link between this check and the mount.

Every job gets ``XPUPOOL_VOLUME_<NAME>`` (the name upper-cased, ``-`` and ``.`` as ``_``): where it
sees the volume. Containers and bwrap see it at the path the job asked for, read-only where it
must be; the host back end has no mount namespace of its own to bind into, so there the variable
is the directory on the host, and read-only is only what the directory's permissions make it.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

from xpupool.agent.launch.spec import LaunchError, LaunchSpec
from xpupool.server.schemas.agent_protocol import VolumeGrant


def env_name(volume: str) -> str:
    return "XPUPOOL_VOLUME_" + "".join(c if c.isalnum() else "_" for c in volume.upper())


def prepare(spec: LaunchSpec, grants: Iterable[VolumeGrant], backend: str) -> LaunchSpec:
    """``spec`` with its volumes' binds (host directory, mount path, read-only) and variables."""
    grants = list(grants)
    if not grants:
        return spec
    uid = os.geteuid() if spec.uid is None else spec.uid
    gid = os.getegid() if spec.gid is None else spec.gid
    binds: list[tuple[str, str, bool]] = []
    env = dict(spec.env)
    for g in grants:
        host = _directory(g, spec.tenant, uid, gid)
        target = g.mount_path
        if not target.startswith("/") or ".." in target.split("/"):
            raise LaunchError(
                f"volume {g.name}: mount path {target!r} is not a plain absolute path"
            )
        if backend == "bwrap" and not Path(target).is_dir():
            raise LaunchError(
                f"volume {g.name}: under bwrap a volume is mounted only where a directory exists "
                f"on the host, and {target} does not"
            )
        binds.append((host, target, g.read_only))
        env[env_name(g.name)] = host if backend == "host" else target
    return replace(spec, env=env, volumes=tuple(binds))


def _directory(g: VolumeGrant, tenant: str, uid: int, gid: int) -> str:
    root = Path(g.host_path)
    if not root.is_absolute():
        raise LaunchError(f"volume {g.name}: {g.host_path!r} is not an absolute path")
    try:
        real = root.resolve(strict=True)
    except OSError as exc:
        raise LaunchError(
            f"volume {g.name}: {g.host_path} cannot be used: {exc.strerror}"
        ) from None
    if not real.is_dir():
        raise LaunchError(f"volume {g.name}: {g.host_path} is not a directory")
    if not g.per_tenant:
        return str(real)
    if not tenant or "/" in tenant or tenant in (".", ".."):
        raise LaunchError(f"volume {g.name}: no tenant to give a directory of its own")
    return str(_tenant_directory(g.name, real, tenant, uid, gid))


def _tenant_directory(volume: str, root: Path, tenant: str, uid: int, gid: int) -> Path:
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    rfd = os.open(root, flags)
    try:
        st = os.fstat(rfd)
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise LaunchError(
                f"volume {volume}: others may write {root}, and so swap a tenant's directory "
                "for a link; make it writable by its owner only"
            )
        try:
            os.mkdir(tenant, 0o700, dir_fd=rfd)
            made = True
        except FileExistsError:
            made = False
        try:
            tfd = os.open(tenant, flags, dir_fd=rfd)
        except OSError as exc:  # ELOOP: a link; ENOTDIR: a file
            raise LaunchError(
                f"volume {volume}: {root / tenant} is not a directory of its own ({exc.strerror})"
            ) from None
        try:
            tst = os.fstat(tfd)
            if made and os.geteuid() == 0:
                os.fchown(tfd, uid, gid)
            elif tst.st_uid != uid:
                raise LaunchError(
                    f"volume {volume}: {root / tenant} belongs to uid {tst.st_uid}, not the job's"
                )
        finally:
            os.close(tfd)
    finally:
        os.close(rfd)
    return root / tenant
