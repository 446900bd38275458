"""The service proxy's own process: ``python -m xpupool.server.front.proxy_main`` (started by
``xpupool up --proxy-port PORT``, never by hand). It serves the listening socket it inherited
(``--fd``) with ``front/proxy_server.py``, takes the services' ready endpoints, their states and
its token checks from the plane's submission channel as the HTTP workers do
(``proxy_source.WorkerSource``), and dies with the plane that started it.

It runs on uvloop when uvicorn's extras installed it (they do): the event loop's own cost per
request is most of what is left once the HTTP framing is httptools'.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import sys
import time
from contextlib import suppress
from pathlib import Path

from xpupool.server.connection_guard import ConnectionLimits
from xpupool.server.front.main import _die_with
from xpupool.server.front.proxy_server import ProxyServer
from xpupool.server.front.proxy_source import WorkerSource
from xpupool.server.front.workers import HttpWorkers
from xpupool.server.service_proxy import ServiceProxy
from xpupool.server.service_traffic import ProxyTraffic


class ProxyProcess(HttpWorkers):
    """The proxy's process, started after the plane listens on its channel, started again
    when it dies, stopped with the plane (``HttpWorkers``' watch, for one process)."""

    def command(self) -> list[str]:
        args = [sys.executable, "-m", "xpupool.server.front.proxy_main"]
        args += ["--fd", str(self.sock.fileno()), "--channel", str(self.sockets.channel)]
        args += ["--header-timeout", repr(self.connections.header_timeout_s)]
        args += ["--connections-per-address", str(self.connections.per_address)]
        return [*args, "--plane-pid", str(os.getpid())]


async def serve(
    listening: socket.socket,
    channel: Path,
    stop: asyncio.Event,
    limits: ConnectionLimits | None = None,
) -> None:
    """Serve ``listening`` until ``stop`` is set, each client held to ``limits``."""
    source = WorkerSource(channel, ProxyTraffic(time.monotonic), kind="proxy-")
    proxy = ServiceProxy(source, source.traffic)
    forwarder = ProxyServer(proxy, limits)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(forwarder.protocol, sock=listening, backlog=2048)
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
    listening: socket.socket, channel: Path, limits: ConnectionLimits
) -> None:
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(signum, stop.set)
    await serve(listening, channel, stop, limits)


def main(argv: list[str] | None = None) -> None:
    from xpupool.agent.launch.guard import protect_process

    parser = argparse.ArgumentParser(prog="xpupool-service-proxy")
    parser.add_argument("--fd", type=int, required=True, help="the inherited listening socket")
    parser.add_argument("--plane-pid", type=int, required=True, help="the process to die with")
    parser.add_argument("--channel", type=Path, required=True)
    parser.add_argument("--header-timeout", type=float, required=True)
    parser.add_argument("--connections-per-address", type=int, required=True)
    args = parser.parse_args(argv)
    limits = ConnectionLimits(args.header_timeout, args.connections_per_address)
    _die_with(args.plane_pid)
    protect_process()  # not dumpable: it holds the tokens of the requests it carries
    listening = socket.socket(fileno=args.fd)
    try:
        import uvloop
    except ImportError:
        asyncio.run(_until_signalled(listening, args.channel, limits))
    else:
        uvloop.run(_until_signalled(listening, args.channel, limits))


if __name__ == "__main__":
    main()
