"""Connections per source address, and how long a request's header may take: a guard in the HTTP
server's protocol, below the app, since neither reaches the app.

uvicorn times only the idle wait between two requests of a kept-alive connection
(``timeout_keep_alive``). A connection that never sends anything, or sends part of a request
header and stops, is kept for ever, and one address may open any number of them (issue 43).
Here, per connection: its request header must be
whole within ``header_timeout_s`` of the connection being made, or of the first byte of each
next request on it, or the connection is closed; and a connection that would make its address
hold more than ``per_address`` is answered 429 and closed at once. Counted per server process
(the plane's port, and the proxy process's own). Addresses are counted as the rate limits
count them (``rate_limit.address_key``).

Built on uvicorn's httptools protocol (uvicorn[standard] installs httptools; ``xpupool up``
names this class, so uvicorn never picks another): its parser says when a message begins and
when its headers are complete.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter
from dataclasses import dataclass
from typing import Any, ClassVar

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from xpupool.server.client_address import address_key

log = logging.getLogger("xpupool.server")

DEFAULT_HEADER_TIMEOUT_S = 10.0
"""A client sends its header in one write; 10 s allows a slow link (Go's servers are often
given 10 s of ReadHeaderTimeout) and ends a connection that holds a slot without asking."""
DEFAULT_CONNECTIONS_PER_ADDRESS = 128
"""Far above one client (a browser opens 6, an agent 1); below what one address may open. Many
agents behind one NAT address each hold a connection: raise it for them."""


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """``header_timeout_s``: the longest a request header may take; ``per_address``: the most
    connections one address may hold open (0: no limit)."""

    header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S
    per_address: int = DEFAULT_CONNECTIONS_PER_ADDRESS


class GuardedHttpProtocol(HttpToolsProtocol):
    """uvicorn's HTTP protocol with the header timeout and the connections per address; use
    :func:`guarded_protocol` for a class with its own limits and counts."""

    limits: ClassVar[ConnectionLimits] = ConnectionLimits()
    open_by_address: ClassVar[Counter[str]] = Counter()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.header_timer: asyncio.TimerHandle | None = None
        self.counted_as: str | None = None  # the address this connection is counted under

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if self.client is not None:
            self.counted_as = address_key(self.client[0])
            self.open_by_address[self.counted_as] += 1
            per_address = self.limits.per_address
            if per_address and self.open_by_address[self.counted_as] > per_address:
                self._refuse(per_address)
                return
        self._time_header()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self.header_timer is None:  # the next request on a kept-alive connection
            self._time_header()

    def on_headers_complete(self) -> None:
        self._untime_header()
        super().on_headers_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._untime_header()
        if self.counted_as is not None:
            self.open_by_address[self.counted_as] -= 1
            if self.open_by_address[self.counted_as] <= 0:
                del self.open_by_address[self.counted_as]
            self.counted_as = None
        super().connection_lost(exc)

    def _time_header(self) -> None:
        self.header_timer = self.loop.call_later(
            self.limits.header_timeout_s, self._header_too_slow
        )

    def _untime_header(self) -> None:
        if self.header_timer is not None:
            self.header_timer.cancel()
            self.header_timer = None

    def _header_too_slow(self) -> None:
        """Closed without an answer: the client either sent nothing or is not sending a request
        a server could answer."""
        self.header_timer = None
        if not self.transport.is_closing():
            log.debug(
                "%s: no whole request header in %g s; closed",
                self.client,
                self.limits.header_timeout_s,
            )
            self.transport.close()

    def _refuse(self, per_address: int) -> None:
        """429 and close, before reading anything: the client may come back when one of its
        other connections is done."""
        self.transport.write(too_many_connections(per_address))
        self.transport.close()


def too_many_connections(per_address: int) -> bytes:
    """The answer to a connection over ``per_address`` (429, then closed), here and in the
    service proxy's own process (``front/proxy_server.py``)."""
    reason = (
        f"over the limit of {per_address} open connections per address "
        "(xpupool up --connections-per-address)"
    )
    body = json.dumps({"field": "address", "value": None, "reason": reason}).encode()
    head = (
        "HTTP/1.1 429 Too Many Requests\r\n"
        "content-type: application/json\r\n"
        f"content-length: {len(body)}\r\n"
        "retry-after: 1\r\n"
        "connection: close\r\n\r\n"
    )
    return head.encode() + body


def guarded_protocol(limits: ConnectionLimits) -> type[GuardedHttpProtocol]:
    """The protocol class to give uvicorn (``http=``) for ``limits``, with counts of its own
    (one server per process in production; several in tests)."""
    attrs = {"limits": limits, "open_by_address": Counter()}
    return type("GuardedHttpProtocol", (GuardedHttpProtocol,), attrs)
