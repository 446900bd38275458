"""A replica's secrets (docs/security.md#secrets) as files on a memory filesystem, and the
variables some of them also become.

The server sends a replica's secrets with its work; the agent writes them here and nowhere else:
never into the replica's run directory (which may sit in the server's data dir, for the agent of
``xpupool up``), its spec file or its logs. Where ``/dev/shm`` is a tmpfs the files never touch a
disk. Layout, under a root private to this agent's work dir::

    ROOT/                    0711, the agent's: a job may pass through, not list it
    ROOT/<run>/              0711, the agent's
    ROOT/<run>/files/        0500, the job's uid: $XPUPOOL_SECRETS_DIR (/run/secrets in a container)
    ROOT/<run>/files/<name>  0400, the job's uid
    ROOT/<run>/env           0400, the agent's: NAME=VALUE for a container's --env-file

A secret asked for as a variable reaches the job's process only at its ``execve``: the supervisor
reads it from the file as it starts the replica (:func:`secret_env`), so the spec file carries
the variable's name and the file's, never the value. The run's directory goes when the replica
is collected, and whatever a dead agent left is removed at its next start.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path

from xpupool.agent.launch.spec import LaunchError, LaunchSpec
from xpupool.server.schemas.agent_protocol import SecretGrant

SHM = Path("/dev/shm")
CONTAINER_DIR = "/run/secrets"
ENV_VAR = "XPUPOOL_SECRETS_DIR"


def secrets_root(work_dir: Path, node: str, job_root: Path) -> Path:
    """A node's root: on ``/dev/shm`` where there is one, else beside the job directories;
    named after the agent's work dir and the node, so that two agents (or two nodes of one) on
    a host never clean each other's."""
    tag = hashlib.sha256(f"{work_dir.resolve()}\0{node}".encode()).hexdigest()[:12]
    base = SHM if SHM.is_dir() and os.access(SHM, os.W_OK) else job_root
    return base / f"xpupool-secrets-{os.geteuid()}-{tag}"


def run_dir(root: Path, spec: LaunchSpec) -> Path:
    return root / spec.slug


def place(root: Path, spec: LaunchSpec, grants: Iterable[SecretGrant]) -> LaunchSpec:
    """Write ``grants`` for ``spec``'s run and return the spec that names them: its
    ``XPUPOOL_SECRETS_DIR`` and the variables to fill from the files at start."""
    grants = list(grants)
    if not grants:
        return spec
    uid = os.geteuid() if spec.uid is None else spec.uid
    gid = os.getegid() if spec.gid is None else spec.gid
    _private_dir(root, 0o711)
    run = run_dir(root, spec)
    shutil.rmtree(run, ignore_errors=True)
    _private_dir(run, 0o711)
    files = run / "files"
    files.mkdir(mode=0o700)
    try:
        for g in grants:
            if "/" in g.name or g.name in ("", ".", ".."):
                raise LaunchError(f"secret {g.name!r}: not a file name")
            try:
                value = base64.b64decode(g.value_base64, validate=True)
            except ValueError:
                raise LaunchError(f"secret {g.name!r}: its value is not base64") from None
            _write(files / g.name, value, uid, gid)
        if os.geteuid() == 0:
            os.chown(files, uid, gid)
        files.chmod(0o500)
    except (OSError, LaunchError):
        remove(root, spec)
        raise
    inside = CONTAINER_DIR if spec.image else str(files)
    env = {**spec.env, ENV_VAR: inside}
    pairs = tuple((g.env, g.name) for g in grants if g.env)
    return replace(spec, env=env, secrets_dir=str(files), secret_env=pairs)


def place_pull_auth(root: Path, spec: LaunchSpec, grant: SecretGrant | None) -> LaunchSpec:
    """Write the registry auth file ``grant`` holds for ``spec``'s pull (after :func:`place`):
    ``<run>/pull/config.json``, the agent's alone (0400 in a 0700 directory), never the job's.
    ``podman pull --authfile`` reads the file, ``docker pull`` the directory (``DOCKER_CONFIG``)."""
    if grant is None:
        return spec
    try:
        value = base64.b64decode(grant.value_base64, validate=True)
        auths = json.loads(value).get("auths")
    except (ValueError, AttributeError):
        auths = None
    if not isinstance(auths, dict):
        raise LaunchError(
            f"pull secret {grant.name!r} is not a registry auth file (JSON with 'auths', as "
            "'podman login --authfile FILE' writes)"
        )
    _private_dir(root, 0o711)
    run = run_dir(root, spec)
    _private_dir(run, 0o711)
    pull = run / "pull"
    shutil.rmtree(pull, ignore_errors=True)
    pull.mkdir(mode=0o700)
    path = pull / "config.json"
    _write(path, value, os.geteuid(), os.getegid())
    return replace(spec, pull_auth=str(path))


def secret_env(spec: LaunchSpec) -> dict[str, str]:
    """The variables ``spec`` asks for, read from its secret files (by the supervisor, which
    runs as the agent's user, before the replica's uid switch)."""
    if not spec.secret_env or not spec.secrets_dir:
        return {}
    out: dict[str, str] = {}
    for var, name in spec.secret_env:
        raw = (Path(spec.secrets_dir) / name).read_bytes()
        try:
            out[var] = raw.decode()
        except UnicodeDecodeError:
            why = f"secret {name!r} is not text: it cannot be the variable {var}"
            raise LaunchError(why) from None
        if "\0" in out[var]:
            raise LaunchError(f"secret {name!r} holds a NUL byte: it cannot be the variable {var}")
    return out


def with_secret_env(spec: LaunchSpec) -> LaunchSpec:
    """``spec`` with the variables it asks for filled in, for the process back ends: its
    environment travels to the job's ``execve`` only (process.py), never to a file."""
    values = secret_env(spec)
    return replace(spec, env={**spec.env, **values}) if values else spec


def env_file_path(spec: LaunchSpec) -> Path:
    return Path(spec.secrets_dir).parent / "env"


def write_env_file(spec: LaunchSpec, values: Mapping[str, str]) -> Path:
    """``values`` as a container's second ``--env-file``, 0400 and the agent's, in the run's
    secret directory (on the memory filesystem, outside what the container mounts)."""
    path = env_file_path(spec)
    lines = []
    for var, value in values.items():
        if "\n" in value or "\r" in value:
            raise LaunchError(
                f"env {var}: a secret with a line break cannot be a container's variable"
            )
        lines.append(f"{var}={value}\n")
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o400)
    with os.fdopen(fd, "w") as f:
        f.writelines(lines)
    return path


def remove(root: Path, spec: LaunchSpec) -> None:
    _remove_tree(run_dir(root, spec))


def remove_leftovers(root: Path, keep: Iterable[str]) -> list[str]:
    """Remove the secret directories of runs not in ``keep`` (slugs): what a dead agent left."""
    kept = set(keep)
    gone = []
    try:
        entries = list(root.iterdir())
    except OSError:
        return []
    for entry in entries:
        if entry.name not in kept:
            _remove_tree(entry)
            gone.append(entry.name)
    return gone


def _private_dir(path: Path, mode: int) -> None:
    path.mkdir(mode=mode, exist_ok=True)
    st = path.lstat()
    if not path.is_dir() or path.is_symlink() or st.st_uid != os.geteuid():
        raise LaunchError(
            f"{path}: not a directory of the agent's own; refusing to put secrets there"
        )
    path.chmod(mode)


def _write(path: Path, value: bytes, uid: int, gid: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, 0o400)
    try:
        os.write(fd, value)
        if os.geteuid() == 0:
            os.fchown(fd, uid, gid)
    finally:
        os.close(fd)


def _remove_tree(path: Path) -> None:
    """Remove ``path`` even where its files are another uid's and read-only (the job's)."""
    if not path.exists():
        return
    for d, _, _ in os.walk(path):
        with contextlib.suppress(OSError):
            os.chmod(d, 0o700)
    shutil.rmtree(path, ignore_errors=True)
