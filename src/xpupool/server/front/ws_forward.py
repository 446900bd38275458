"""A websocket an HTTP worker takes (a service's proxy path, ``server/service_proxy.py``),
passed to the plane's HTTP server on its Unix socket with the address and scheme the worker saw
(``wire.CLIENT_HEADER``, ``wire.SCHEME_HEADER``, as for every request), then message by message
both ways (``websocket_pump.py``). A handshake the plane refuses is refused here alike (403)."""

from __future__ import annotations

from pathlib import Path

from starlette.types import Receive, Scope, Send
from websockets.asyncio.client import unix_connect
from websockets.exceptions import InvalidHandshake
from websockets.typing import Subprotocol

from xpupool.server.front.wire import CLIENT_HEADER, SCHEME_HEADER
from xpupool.server.websocket_pump import accept_and_pump

NOT_PASSED = frozenset({CLIENT_HEADER, SCHEME_HEADER, b"host", b"connection", b"upgrade"})
PLANE_OPEN_TIMEOUT_S = 10.0


async def forward_websocket(plane_http: Path, scope: Scope, receive: Receive, send: Send) -> None:
    if (await receive())["type"] != "websocket.connect":
        return
    raw: bytes = scope.get("raw_path") or scope["path"].encode()
    query: bytes = scope.get("query_string", b"")
    uri = "ws://plane" + (raw + (b"?" + query if query else b"")).decode("latin-1")
    client = scope.get("client")
    scheme = "https" if scope.get("scheme") == "wss" else "http"
    headers = [
        (k.decode("latin-1"), v.decode("latin-1"))
        for k, v in scope["headers"]
        if k not in NOT_PASSED and not k.startswith(b"sec-websocket-")
    ]
    headers.append((CLIENT_HEADER.decode(), str(client[0]) if client else ""))
    headers.append((SCHEME_HEADER.decode(), scheme))
    wanted = [Subprotocol(p) for p in scope.get("subprotocols") or []]
    try:
        upstream = await unix_connect(
            str(plane_http),
            uri,
            additional_headers=headers,
            subprotocols=wanted or None,
            compression=None,
            open_timeout=PLANE_OPEN_TIMEOUT_S,
            max_size=None,
            user_agent_header=None,
        )
    except (OSError, InvalidHandshake, TimeoutError):
        await send({"type": "websocket.close", "code": 1008})
        return
    await accept_and_pump(upstream, receive, send)
