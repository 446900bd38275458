"""The HTTP workers of ``xpupool up --http-workers N``: started after the plane listens, started
again when one dies, stopped with the plane.

The plane binds the API's port itself and hands the socket to each worker (``--fd``), so the
port is taken (and known, with ``--port 0``) before any worker runs, and the kernel shares the
connections out among them. The plane itself listens only on two Unix sockets in a private
directory (mode 0700): its HTTP server, to which the workers pass every request but submissions,
and the submission channel (``front/plane_side.py``).
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from xpupool.model.errors import XpupoolError
from xpupool.server.connection_guard import ConnectionLimits

log = logging.getLogger("xpupool.server")
RESTART_AFTER_S = 1.0  # a worker that dies is started again after this long


@dataclass(frozen=True, slots=True)
class PlaneSockets:
    """Where the plane listens for its workers: a directory only the plane's user may enter."""

    root: Path

    @classmethod
    def create(cls) -> PlaneSockets:
        # Not in the data dir: a Unix socket's path must fit in 108 bytes
        return cls(Path(tempfile.mkdtemp(prefix="xpupool-plane-")))

    @property
    def http(self) -> Path:
        return self.root / "http.sock"

    @property
    def channel(self) -> Path:
        return self.root / "submit.sock"

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


class ListenError(XpupoolError):
    """The API's address cannot be taken (in use, not this host's); the message is one line."""


def listen(host: str, port: int) -> socket.socket:
    """The API's listening socket, bound by the plane for its workers."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        sock = socket.create_server((host, port), family=family, backlog=2048)
    except OSError as exc:
        raise ListenError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.set_inheritable(True)
    return sock


class HttpWorkers:
    """``count`` worker processes serving ``sock`` for the plane at ``sockets``, each with the
    ``connections`` limits of its own (``connection_guard.py``)."""

    def __init__(
        self,
        count: int,
        sock: socket.socket,
        sockets: PlaneSockets,
        max_body: int,
        tls: tuple[Path, Path] | None = None,
        connections: ConnectionLimits | None = None,
    ) -> None:
        self.count = count
        self.sock = sock
        self.sockets = sockets
        self.max_body = max_body
        self.tls = tls
        self.connections = connections or ConnectionLimits()
        self.procs: list[subprocess.Popen[bytes]] = []
        self.stopped = threading.Event()
        self.lock = threading.Lock()  # the watch starts none once stop has begun
        self.watch = threading.Thread(target=self._watch, name="xpupool-http-workers", daemon=True)

    def command(self) -> list[str]:
        args = [sys.executable, "-m", "xpupool.server.front.main", "--fd", str(self.sock.fileno())]
        args += ["--plane-pid", str(os.getpid())]
        args += ["--plane-http", str(self.sockets.http), "--channel", str(self.sockets.channel)]
        args += ["--max-body", str(self.max_body)]
        args += ["--header-timeout", repr(self.connections.header_timeout_s)]
        args += ["--connections-per-address", str(self.connections.per_address)]
        if self.tls is not None:
            args += ["--tls-cert", str(self.tls[0]), "--tls-key", str(self.tls[1])]
        return args

    def _spawn(self) -> subprocess.Popen[bytes]:
        return subprocess.Popen(self.command(), pass_fds=(self.sock.fileno(),))

    def start(self) -> None:
        with self.lock:
            self.procs = [self._spawn() for _ in range(self.count)]
        self.watch.start()

    def _watch(self) -> None:
        while not self.stopped.wait(RESTART_AFTER_S):
            with self.lock:
                for k, proc in enumerate(self.procs):
                    code = proc.poll()
                    if code is not None and not self.stopped.is_set():
                        log.warning("HTTP worker %d exited (%d); starting another", proc.pid, code)
                        self.procs[k] = self._spawn()

    def stop(self) -> None:
        with self.lock:
            self.stopped.set()
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
