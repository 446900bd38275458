"""``xpupool up --standby``: a second plane on the same database that takes over when the active
one is lost.

One writer, one mechanism: the store's owner row (``server/ownership.py``). The standby tries
:meth:`StoreOwnership.claim` every :data:`POLL_S`; the claim succeeds once the active plane's
lease has ended (it stopped renewing: killed, paused, cut off from the database) or was released
(a clean stop). Until then the standby holds its port with a small HTTP server that answers every
request 503, ``/healthz`` included, naming the owner: a load balancer or Kubernetes Service sends
nothing to it, and a client that reaches it is told to retry. Once the claim succeeds, the port
is let go and the start goes on as any start does: the plane rebuilds its books from the store,
and agents and clients that retry reach it.

Timings with the default ``--store-lease`` of 10 s: the active plane renews every 2 s; the
standby may take the store 2 s (the clock allowance) after the lease ends, and looks every
:data:`POLL_S`; so it claims at most 10 + 2 + 0.5 s after the active plane's last renewal, and
serves once it has read the pool from the store: the rest of a start (the schema, imports,
compiled loops) is done while it stands by. The plane that lost the store never writes again:
every commit checks the owner row's epoch (the fence), and a plane that cannot renew gives the
store up when its lease ends, on its own clock. Figures: docs/benchmarks.md.
"""

from __future__ import annotations

import logging
import ssl
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from sqlalchemy.exc import OperationalError

from xpupool.server.ownership import StoreInUseError, StoreOwnership

log = logging.getLogger("xpupool.server")

POLL_S = 0.5  # between two claims


class _Standby(BaseHTTPRequestHandler):
    """Every request: 503 with why (the server's ``why`` attribute)."""

    server: _StandbyServer

    def _answer(self) -> None:
        body = f"standby: {self.server.why}\n".encode()
        self.send_response(503)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Retry-After", "2")
        self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _answer  # noqa: N815 - the base's names

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: a health check every few seconds is no news."""


class _StandbyServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    why = "waiting for the store's owner row (server/standby.py)"


def wait_for_store(
    owner: StoreOwnership,
    host: str,
    port: int,
    echo: Callable[[str], None],
    *,
    tls: tuple[Path, Path] | None = None,
    poll_s: float = POLL_S,
    stopped: threading.Event | None = None,
    prepare: Callable[[], None] | None = None,
) -> None:
    """Answer 503 on ``host:port`` and claim the store every ``poll_s`` until the claim
    succeeds; then free the port and return (the caller starts the plane). ``stopped``: set to
    give up (returns with the store not claimed). ``prepare``: run on a thread of its own while
    standing by, for the start's work that needs no store (imports, compiled loops), which would
    otherwise come after the take-over, before serving. The first claim opens the owner's
    engine and makes the schema (``StoreOwnership.made_schema``), also before the take-over."""
    if prepare is not None:
        threading.Thread(target=prepare, name="xpupool-standby-prepare", daemon=True).start()
    server = _StandbyServer((host, port), _Standby)
    if tls is not None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(tls[0]), str(tls[1]))
        server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, name="xpupool-standby", daemon=True)
    thread.start()
    told: type[Exception] | None = None  # the kind of refusal last printed
    kind: type[Exception]
    try:
        while stopped is None or not stopped.is_set():
            try:
                owner.claim()
                break
            except StoreInUseError as exc:  # the owner and when its lease ends, not the advice
                server.why, kind = str(exc).split(" unless it renews", 1)[0], StoreInUseError
            except OperationalError as exc:  # the database is unreachable: try again
                server.why, kind = f"the store cannot be reached: {exc.orig}", OperationalError
            if kind is not told:  # once per change, not every poll
                echo(f"standby: {server.why}")
                told = kind
            time.sleep(poll_s)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
    if owner.epoch is not None:
        log.warning("standby: the store is ours (epoch %d); starting the plane", owner.epoch)
        echo(f"standby: took the store (epoch {owner.epoch}); starting")
