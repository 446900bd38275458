"""A websocket on a service's proxy path in the proxy's own process (``proxy_server.py``): the
caller checked as for any request, the replica's handshake made with the client's own headers,
and once the replica answers 101 the bytes flow both ways untouched (no frame is parsed).
Refusals are the ASGI proxy's (``service_proxy_ws.py``): a refused caller gets 403; no ready
replica, a handshake then a close with 1013 (1008 for a service not found) naming why; no
replica taking it, 1011.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import struct
from contextlib import suppress
from typing import TYPE_CHECKING, Any

from xpupool.server.service_caller import Caller
from xpupool.server.service_proxy import CONNECT_TIMEOUT_S, forwarded_headers, upstream_path
from xpupool.server.service_proxy_ws import FAILED, POLICY, TRY_AGAIN
from xpupool.server.upstream_http import UpstreamConnection, UpstreamError

if TYPE_CHECKING:
    from xpupool.server.front.proxy_server import ClientConnection, ClientRequest

READ_BYTES = 65536
WS_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # RFC 6455, 1.3


class WebsocketSplice:
    """A websocket on a proxy path: the caller checked as for any request, the replica's
    handshake made with the client's own headers, and once it answers 101 the bytes flow both
    ways untouched. Refusals are the ASGI proxy's: a refused caller gets 403; no ready replica,
    a handshake then a close with 1013 (1008 for a service not found) naming why; no replica
    taking it, 1011."""

    def __init__(
        self, client: ClientConnection, request: ClientRequest, scope: dict[str, Any]
    ) -> None:
        self.client = client
        self.request = request
        self.scope = {**scope, "type": "websocket"}

    async def run(self) -> None:
        proxy = self.client.server.proxy
        headers, authorization = forwarded_headers(self.scope)
        who = await proxy.who(self.scope, authorization)
        if not isinstance(who, Caller):
            await self.client.write(
                b"HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
            )
            return
        name: str = self.scope["path_params"]["name"]
        endpoints = proxy.order(who.tenant, name)
        if not endpoints:
            status, why, _ = await proxy.none_ready(who.tenant, name)
            await self.refuse(TRY_AGAIN if status == 503 else POLICY, why)
            return
        passed = [(k, v) for k, v in headers]
        passed += [(k, v) for k, v in self.request.headers if k.startswith(b"sec-websocket-")]
        passed += [(b"connection", b"Upgrade"), (b"upgrade", b"websocket")]
        target = upstream_path(self.scope, name)
        causes: list[str] = []
        for endpoint in endpoints:
            address = (endpoint.host, endpoint.port)
            try:
                conn, _ = await self.client.server.pool.connection(address)
            except UpstreamError as exc:
                causes.append(f"{endpoint.host}:{endpoint.port}: {exc}")
                continue
            head = [b"GET " + target + b" HTTP/1.1"]
            head += [b"host: %s:%d" % (address[0].encode(), address[1])]
            head += [k + b": " + v for k, v in passed]
            conn.writer.write(b"\r\n".join(head) + b"\r\n\r\n")
            answer = await self._upstream_head(conn)
            if answer is None or not answer.startswith(b"HTTP/1.1 101"):
                conn.close()
                line = answer.split(b"\r\n", 1)[0].decode("latin-1") if answer else "closed"
                causes.append(f"{endpoint.host}:{endpoint.port}: {line}")
                if answer is None:
                    continue
                break
            proxy.traffic.started(who.tenant, name, endpoint)
            try:
                await self.splice(conn, answer)
            finally:
                proxy.traffic.finished(who.tenant, name, endpoint, 101, None)
            return
        why = f"service {name}: no replica took the websocket ({'; '.join(causes)})"
        await self.refuse(FAILED, why)

    async def _upstream_head(self, conn: UpstreamConnection) -> bytes | None:
        """The replica's answer to the handshake, up to its blank line (frames after it stay in
        the reader); None when it closed or reset first."""
        try:
            return await asyncio.wait_for(conn.reader.readuntil(b"\r\n\r\n"), CONNECT_TIMEOUT_S)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
            return None

    async def splice(self, conn: UpstreamConnection, answer: bytes) -> None:
        """The replica's 101 to the client, then bytes both ways until either side closes."""
        client = self.client
        assert client.transport is not None
        await client.write(answer)
        if self.request.upgrade:
            conn.writer.write(self.request.upgrade)
        loop = asyncio.get_running_loop()
        ours = ClientPump(conn.writer)
        client.transport.set_protocol(ours)
        client.transport.resume_reading()

        async def down() -> None:
            while True:
                data = await conn.reader.read(READ_BYTES)
                if not data:
                    return
                await client.write(data)

        downward = loop.create_task(down())
        try:
            upward = loop.create_task(ours.closed.wait())
            await asyncio.wait((downward, upward), return_when=asyncio.FIRST_COMPLETED)
        finally:
            downward.cancel()
            upward.cancel()
            conn.close()

    async def refuse(self, code: int, reason: str) -> None:
        """Accept the client's handshake, then close with ``code`` and ``reason``."""
        key = next((v for k, v in self.request.headers if k == b"sec-websocket-key"), b"")
        accept = base64.b64encode(hashlib.sha1(key.strip() + WS_GUID).digest())
        said = reason.encode()[:120]
        payload = struct.pack(">H", code) + said
        handshake = b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\n"
        handshake += b"connection: Upgrade\r\nsec-websocket-accept: " + accept + b"\r\n\r\n"
        await self.client.write(handshake + b"\x88" + bytes([len(payload)]) + payload)


class ClientPump(asyncio.Protocol):
    """The client's side of a websocket once spliced: its bytes written to the replica."""

    def __init__(self, upstream: asyncio.StreamWriter) -> None:
        self.upstream = upstream
        self.closed = asyncio.Event()

    def data_received(self, data: bytes) -> None:
        self.upstream.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed.set()
        with suppress(Exception):
            self.upstream.close()
