"""The admin token file: written on a pool's first start, replaced on demand.

The store keeps only the token's hash, so a lost ``DATA/admin-token`` cannot be read back;
rotation (``xpupool up --rotate-admin-token``) is how it is recreated, and it revokes every earlier
admin token at the same time. The file is mode 0600 from its first byte (``write_private``), and
is replaced only once the store has committed the new token, so it never holds a token that does
not work.
"""

from __future__ import annotations

from pathlib import Path

from xpupool.server.auth import new_token
from xpupool.server.datadir import write_private
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
