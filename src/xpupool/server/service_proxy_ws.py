"""A websocket on a service's proxy path (``service_proxy.py``), passed through to a ready replica:
the caller is checked as for any request, the replica's handshake is made first (a refused
connection tries the next replica, as for HTTP), then the caller's is accepted with the
subprotocol the replica chose, and messages flow both ways until either side closes.

Refused before the handshake, the caller gets the server's plain 403 (ASGI closes an unaccepted
websocket so); with no replica reachable, the socket is accepted and closed at once with 1013
(try again later) or 1011 and the reason.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.types import Receive, Scope, Send
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidHandshake, InvalidStatus
from websockets.typing import Subprotocol

from xpupool.server.service_caller import Caller
from xpupool.server.service_proxy import CONNECT_TIMEOUT_S, forwarded_headers, upstream_path
from xpupool.server.websocket_pump import accept_and_pump

if TYPE_CHECKING:
    from xpupool.server.service_proxy import ServiceProxy

TRY_AGAIN = 1013
FAILED = 1011
POLICY = 1008  # as a refused caller: the service is not found


async def forward_websocket(
    proxy: ServiceProxy, scope: Scope, receive: Receive, send: Send
) -> None:
    """Pass the websocket of ``scope`` through to one of its service's ready replicas."""
    if (await receive())["type"] != "websocket.connect":
        return
    headers, authorization = forwarded_headers(scope)
    who = await proxy.who(scope, authorization)
    if not isinstance(who, Caller):
        await send({"type": "websocket.close", "code": 1008, "reason": who[1]})
        return
    name: str = scope["path_params"]["name"]
    endpoints = proxy.order(who.tenant, name)
    if not endpoints:
        status, why, _ = await proxy.none_ready(who.tenant, name)
        await _refuse(send, TRY_AGAIN if status == 503 else POLICY, why)
        return
    passed = [
        (k.decode("latin-1"), v.decode("latin-1"))
        for k, v in headers
        if not k.startswith(b"sec-websocket-")
    ]
    wanted = [Subprotocol(p.strip()) for p in (scope.get("subprotocols") or []) if p.strip()]
    path = upstream_path(scope, name).decode("latin-1")
    causes: list[str] = []
    for endpoint in endpoints:
        try:
            upstream = await connect(
                f"ws://{endpoint.host}:{endpoint.port}{path}",
                additional_headers=passed,
                subprotocols=wanted or None,
                compression=None,
                proxy=None,
                open_timeout=CONNECT_TIMEOUT_S,
                max_size=None,
                user_agent_header=None,
            )
        except (OSError, InvalidHandshake, TimeoutError) as exc:
            if isinstance(exc, InvalidStatus):  # the replica answered: no other one is asked
                causes.append(f"{endpoint.host}:{endpoint.port}: {exc}")
                break
            causes.append(f"{endpoint.host}:{endpoint.port}: {type(exc).__name__}: {exc}")
            continue
        proxy.traffic.started(who.tenant, name, endpoint)
        try:
            await accept_and_pump(upstream, receive, send)
        finally:
            proxy.traffic.finished(who.tenant, name, endpoint, 101, None)
        return
    await _refuse(
        send, FAILED, f"service {name}: no replica took the websocket ({'; '.join(causes)})"
    )


async def _refuse(send: Send, code: int, reason: str) -> None:
    await send({"type": "websocket.accept"})
    await send({"type": "websocket.close", "code": code, "reason": reason[:120]})
