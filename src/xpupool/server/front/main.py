"""An HTTP worker process: ``python -m xpupool.server.front.main`` (started by ``xpupool up
--http-workers N``, never by hand). It serves the listening socket it inherited (``--fd``) with
``front/app.py`` and dies with the plane that started it."""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import socket
import sys
from pathlib import Path

from xpupool.server.body_limit import LOG_UPLOAD, BodyLimit
from xpupool.server.connection_guard import ConnectionLimits, guarded_protocol
from xpupool.server.front.app import FrontApp
from xpupool.server.service_proxy import ProxyFirst

PR_SET_PDEATHSIG = 1


def _die_with(plane_pid: int) -> None:
    """Ask for SIGTERM when the plane dies, then look whether it has died already: the request
    covers only deaths after it, and a worker is slow to get here (its imports), so a plane that
    crashed in between would otherwise leave it serving on the plane's port forever."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != plane_pid:
        raise SystemExit(f"xpupool-http-worker: the plane (pid {plane_pid}) is gone")


def main(argv: list[str] | None = None) -> None:

    from xpupool.agent.launch.guard import protect_process

    parser = argparse.ArgumentParser(prog="xpupool-http-worker")
    parser.add_argument("--fd", type=int, required=True, help="the inherited listening socket")
    parser.add_argument("--plane-pid", type=int, required=True, help="the process to die with")
    parser.add_argument("--plane-http", type=Path, required=True)
    parser.add_argument("--channel", type=Path, required=True)
    parser.add_argument("--max-body", type=int, required=True)
    parser.add_argument("--header-timeout", type=float, required=True)
    parser.add_argument("--connections-per-address", type=int, required=True)
    parser.add_argument("--tls-cert")
    parser.add_argument("--tls-key")
    args = parser.parse_args(argv)
    _die_with(args.plane_pid)  # a plane killed outright takes its workers with it
    import uvicorn

    protect_process()  # not dumpable: it holds the tokens of the requests it carries
    front = FrontApp(args.plane_http, args.channel)
    # a service's proxy path first, outside the API's body limit, as in the plane (app.py)
    app = ProxyFirst(BodyLimit(front, max_bytes=args.max_body, routes=[LOG_UPLOAD]), front.services)
    config = uvicorn.Config(
        app,
        log_level="warning",
        access_log=False,
        lifespan="on",
        ssl_certfile=args.tls_cert,
        ssl_keyfile=args.tls_key,
        http=guarded_protocol(ConnectionLimits(args.header_timeout, args.connections_per_address)),
    )
    # The socket as it is (TCP), not uvicorn's ``fd=``, which takes any inherited socket for a
    # Unix one: the connections then go without TCP_NODELAY, and an answer's headers and body,
    # two writes, wait out the client's delayed ACK (40 ms) between them.
    listening = socket.socket(fileno=args.fd)
    uvicorn.Server(config).run(sockets=[listening])


if __name__ == "__main__":
    main()
