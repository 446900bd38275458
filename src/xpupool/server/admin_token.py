"""The admin token file: written on a pool's first start, replaced on demand.

The store keeps only the token's hash, so a lost ``DATA/admin-token`` cannot be read back;
rotation (``xpupool up --rotate-admin-token``) is how it is recreated, and it revokes every earlier
admin token at the same time. ``--admin-token-file`` gives the token instead (an operator's
secret, the same file for a plane and its standby: both accept it whichever made the store). The
file is mode 0600 from its first byte (``write_private``), and is replaced only once the store
has committed the new token, so it never holds a token that does not work.
"""

from __future__ import annotations

import re
from pathlib import Path

from xpupool.server.auth import new_token
from xpupool.server.datadir import DataDirError, write_private
from xpupool.server.plane import ControlPlane
from xpupool.server.services.tenants import ensure_admin_token


def admin_token_path(data: Path) -> Path:
    return data / "admin-token"


def ensure(plane: ControlPlane, data: Path) -> str | None:
    """Create the admin token on a pool's first start and write its file. Returns a warning
    line when the store has an admin token but the file is gone; None otherwise."""
    path = admin_token_path(data)
    token = ensure_admin_token(plane)
    if token is not None:
        write_private(path, token + "\n")
        return None
    if not path.exists():
        return (
            f"{path} is missing: the admin token in the store still works; "
            "`xpupool up --rotate-admin-token` writes a new one and revokes it"
        )
    return None


def rotate(plane: ControlPlane, data: Path) -> None:
    """A new admin token in the store and in the file; every earlier admin token is revoked."""
    token = new_token()

    write_private(admin_token_path(data), token + "\n", lambda: plane.rotate_admin_token(token))


GIVEN_TOKEN = re.compile(r"[A-Za-z0-9._~+/=-]{24,200}")
"""An admin token an operator gives: 24 to 200 characters of a token's alphabet (base64, URL-safe
or not, hex); what ``new_token`` makes is one. No whitespace: a file's final newline is dropped."""


def adopt(plane: ControlPlane, data: Path, token_file: Path) -> None:
    """The admin token is the one in ``token_file``: stored, and every other admin token revoked,
    unless it is a live admin token already (a standby's start, a restart); copied to the data
    dir's file (which the CLI on this host reads) once the store has it. A file without such a
    token is refused, naming it and the reason."""
    try:
        token = token_file.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise DataDirError(f"--admin-token-file {token_file}: cannot be read: {exc}") from None
    if not GIVEN_TOKEN.fullmatch(token):
        raise DataDirError(
            f"--admin-token-file {token_file}: not a token: 24 to 200 characters of A-Z a-z 0-9 "
            "and ._~+/=- on one line (e.g. openssl rand -hex 32)"
        )
    write_private(admin_token_path(data), token + "\n", lambda: plane.adopt_admin_token(token))
