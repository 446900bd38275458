"""Where a request came from: the address the plane takes for it (its own peer, or, behind the
HTTP workers, the one its worker saw), the scheme the client spoke, and what an address is
counted as by the limits per address (the rate limits, ``rate_limit.py``, and the connections
per address, ``connection_guard.py``). The audit names the same address (``audit_http.py``). Its
own module so that an HTTP worker, which counts connections, imports nothing of the plane.

Behind the workers the plane's own socket is a Unix one speaking plain HTTP: without
:class:`FromWorkers` every request would look local and ``http``, so the dashboard refused a
browser's correct ``https://`` Origin and never set its cookie ``Secure``."""

from __future__ import annotations

import ipaddress
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from xpupool.server.front.wire import CLIENT_HEADER, SCHEME_HEADER

SCHEMES = frozenset({"http", "https"})


def header(scope: Scope, name: bytes) -> str | None:
    """The first ``name`` header of an ASGI request, as Starlette reads it."""
    for key, value in scope.get("headers", ()):
        if key == name:
            return str(value.decode("latin-1"))
    return None


def client_address(scope: Scope) -> str | None:
    """The request's source address: the socket's peer (behind the HTTP workers, the one the
    worker saw: :class:`FromWorkers` put it there)."""
    client: Any = scope.get("client")
    return str(client[0]) if client else None


class FromWorkers:
    """ASGI middleware, outermost on the plane's socket behind its HTTP workers (and only
    there: that socket is reached by the workers alone, in a directory of mode 0700): each
    request is given the address and the scheme its worker saw (``wire.CLIENT_HEADER``,
    ``wire.SCHEME_HEADER``), so that everything after it (limits, audit, the dashboard's
    origin check and cookies, ``request.url``) reads the request as the client sent it. The
    worker drops those headers from what a client sends; here they are taken off the request
    once read."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):  # a websocket: a service's proxy path
            scope = dict(scope)
            address = header(scope, CLIENT_HEADER)
            if address is not None:
                scope["client"] = (address, 0)
            scheme = header(scope, SCHEME_HEADER)
            if scheme in SCHEMES:
                secure = scheme == "https"
                scope["scheme"] = scheme if scope["type"] == "http" else ("wss" if secure else "ws")
            scope["headers"] = [
                (k, v) for k, v in scope["headers"] if k not in (CLIENT_HEADER, SCHEME_HEADER)
            ]
        await self.app(scope, receive, send)


def address_key(host: str | None) -> str:
    """What an address is counted by: an IPv4 address itself, an IPv6 address by its /64 (a
    host is given a whole /64, so each of its addresses would be a fresh bucket); '' unknown."""
    if not host:
        return ""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return host
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:  # an IPv4 client on a dual-stack socket
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)
