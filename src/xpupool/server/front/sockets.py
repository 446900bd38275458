"""The sockets of the service proxy's own process (``xpupool up --proxy-port``): the plane binds
the proxy's port itself and hands the socket to the process (``--fd``), so the port is taken (and
known, with ``--port 0``) before the process runs; the process polls the plane on a Unix socket in
a private directory (mode 0700), the channel (``front/plane_side.py``).
"""

from __future__ import annotations

import shutil
import socket
import tempfile
from dataclasses import dataclass
from pathlib import Path

from xpupool.model.errors import XpupoolError


@dataclass(frozen=True, slots=True)
class PlaneSockets:
    """Where the plane listens for its proxy process: a directory only the plane's user may
    enter."""

    root: Path

    @classmethod
    def create(cls) -> PlaneSockets:
        # Not in the data dir: a Unix socket's path must fit in 108 bytes
        return cls(Path(tempfile.mkdtemp(prefix="xpupool-plane-")))

    @property
    def channel(self) -> Path:
        return self.root / "channel.sock"

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


class ListenError(XpupoolError):
    """The proxy's address cannot be taken (in use, not this host's); the message is one line."""


def listen(host: str, port: int) -> socket.socket:
    """A listening socket bound by the plane for its proxy process, inheritable by it."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        sock = socket.create_server((host, port), family=family, backlog=2048)
    except OSError as exc:
        raise ListenError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.set_inheritable(True)
    return sock
