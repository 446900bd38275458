"""Where a request came from: the address the plane takes for it (its socket's peer), and what an
address is counted as by the limits per address (the rate limits, ``rate_limit.py``, and the
connections per address, ``connection_guard.py``). The audit names the same address
(``audit_http.py``). Its own module so that the proxy process, which counts connections, imports
nothing of the plane."""

from __future__ import annotations

import ipaddress
from typing import Any

from starlette.types import Scope


def header(scope: Scope, name: bytes) -> str | None:
    """The first ``name`` header of an ASGI request, as Starlette reads it."""
    for key, value in scope.get("headers", ()):
        if key == name:
            return str(value.decode("latin-1"))
    return None


def client_address(scope: Scope) -> str | None:
    """The request's source address: the socket's peer."""
    client: Any = scope.get("client")
    return str(client[0]) if client else None


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
