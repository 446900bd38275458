"""The service proxy's own process: ``python -m xpupool.server.front.proxy_main`` (started by
``xpupool up --proxy-port PORT``, never by hand). It serves the listening socket it inherited
(``--fd``) with ``front/proxy_server.py``, takes the services' ready endpoints, their states and
its token checks from the plane's channel (``front/plane_side.py``, ``proxy_source.WorkerSource``),
and dies with the plane that started it. With ``up --tls-cert``
it serves HTTPS with the plane's certificate, as the API's port does: a caller's bearer token
crosses this port too, and must not cross it in the clear where the API's would not.

It runs on uvloop when uvicorn's extras installed it (they do): the event loop's own cost per
request is most of what is left once the HTTP framing is httptools'.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import logging
import os
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from contextlib import suppress
from pathlib import Path

from xpupool.server.connection_guard import ConnectionLimits
from xpupool.server.front.proxy_server import ProxyServer
from xpupool.server.front.proxy_source import WorkerSource
from xpupool.server.front.sockets import PlaneSockets
from xpupool.server.service_proxy import ServiceProxy
from xpupool.server.service_traffic import ProxyTraffic

log = logging.getLogger("xpupool.server")
RESTART_AFTER_S = 1.0  # a proxy process that dies is started again after this long
PR_SET_PDEATHSIG = 1  # prctl(2)


def _die_with(plane_pid: int) -> None:
    """Ask for SIGTERM when the plane dies, then look whether it has died already: the request
    covers only deaths after it, and the process is slow to get here (its imports), so a plane
    that crashed in between would otherwise leave it serving on the plane's port forever."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != plane_pid:
        raise SystemExit(f"xpupool-service-proxy: the plane (pid {plane_pid}) is gone")


class ProxyProcess:
    """The proxy's process, started after the plane listens on its channel, started again
    when it dies (after ``RESTART_AFTER_S``), stopped with the plane."""

    def __init__(
        self,
        sock: socket.socket,
        sockets: PlaneSockets,
        tls: tuple[Path, Path] | None = None,
        connections: ConnectionLimits | None = None,
    ) -> None:
        self.sock = sock
        self.sockets = sockets
        self.tls = tls
        self.connections = connections or ConnectionLimits()
        self.proc: subprocess.Popen[bytes] | None = None
        self.stopped = threading.Event()
        self.lock = threading.Lock()  # the watch starts none once stop has begun
        self.watch = threading.Thread(target=self._watch, name="xpupool-proxy", daemon=True)

    def command(self) -> list[str]:
        args = [sys.executable, "-m", "xpupool.server.front.proxy_main"]
        args += ["--fd", str(self.sock.fileno()), "--channel", str(self.sockets.channel)]
        args += ["--header-timeout", repr(self.connections.header_timeout_s)]
        args += ["--connections-per-address", str(self.connections.per_address)]
        if self.tls is not None:
            args += ["--tls-cert", str(self.tls[0]), "--tls-key", str(self.tls[1])]
        return [*args, "--plane-pid", str(os.getpid())]

    def _spawn(self) -> subprocess.Popen[bytes]:
        return subprocess.Popen(self.command(), pass_fds=(self.sock.fileno(),))

    def start(self) -> None:
        with self.lock:
            self.proc = self._spawn()
        self.watch.start()

    def _watch(self) -> None:
        while not self.stopped.wait(RESTART_AFTER_S):
            with self.lock:
                proc = self.proc
                code = None if proc is None else proc.poll()
                if proc is not None and code is not None and not self.stopped.is_set():
                    log.warning("service proxy %d exited (%d); starting another", proc.pid, code)
                    self.proc = self._spawn()

    def stop(self) -> None:
        with self.lock:
            self.stopped.set()
        proc = self.proc
        if proc is None:
            return
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def server_context(cert: Path, key: Path) -> ssl.SSLContext:
    """The server side of TLS for the proxy's port: the certificate (chain) and key the API's
    port serves, TLS 1.2 at least, HTTP/1.1 offered by ALPN (the forwarder speaks nothing
    else). A certificate or key that cannot be read stops the process with the file's error."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(str(cert), str(key))
    context.set_alpn_protocols(["http/1.1"])
    return context


async def serve(
    listening: socket.socket,
    channel: Path,
    stop: asyncio.Event,
    limits: ConnectionLimits | None = None,
    tls: ssl.SSLContext | None = None,
) -> None:
    """Serve ``listening`` until ``stop`` is set, each client held to ``limits``, over TLS when
    ``tls`` is given."""
    source = WorkerSource(channel, ProxyTraffic(time.monotonic), kind="proxy-")
    proxy = ServiceProxy(source, source.traffic)
    forwarder = ProxyServer(proxy, limits)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(forwarder.protocol, sock=listening, backlog=2048, ssl=tls)
    poller = loop.create_task(source.run())
    try:
        await stop.wait()
    finally:
        server.close()
        poller.cancel()
        with suppress(asyncio.CancelledError):
            await poller
        source.close()
        forwarder.close()
        await proxy.close()


async def _until_signalled(
    listening: socket.socket,
    channel: Path,
    limits: ConnectionLimits,
    tls: ssl.SSLContext | None,
) -> None:
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(signum, stop.set)
    await serve(listening, channel, stop, limits, tls)


def main(argv: list[str] | None = None) -> None:
    from xpupool.agent.launch.guard import protect_process

    parser = argparse.ArgumentParser(prog="xpupool-service-proxy")
    parser.add_argument("--fd", type=int, required=True, help="the inherited listening socket")
    parser.add_argument("--plane-pid", type=int, required=True, help="the process to die with")
    parser.add_argument("--channel", type=Path, required=True)
    parser.add_argument("--header-timeout", type=float, required=True)
    parser.add_argument("--connections-per-address", type=int, required=True)
    parser.add_argument("--tls-cert", type=Path)
    parser.add_argument("--tls-key", type=Path)
    args = parser.parse_args(argv)
    limits = ConnectionLimits(args.header_timeout, args.connections_per_address)
    tls = None if args.tls_cert is None else server_context(args.tls_cert, args.tls_key)
    _die_with(args.plane_pid)
    protect_process()  # not dumpable: it holds the tokens of the requests it carries
    listening = socket.socket(fileno=args.fd)
    try:
        import uvloop
    except ImportError:
        asyncio.run(_until_signalled(listening, args.channel, limits, tls))
    else:
        uvloop.run(_until_signalled(listening, args.channel, limits, tls))


if __name__ == "__main__":
    main()
