"""The service proxy's own process (``xpupool up --proxy-port``): an HTTP/1.1 forwarder written at
the level of asyncio's Protocol with httptools' parsers, for the least work per proxied request.

The ASGI proxy (``service_proxy.py``) pays, per request, for uvicorn's ASGI messages and h11's
framing of the replica's answer on the way back (docs/benchmarks.md). Here a request's head is
parsed once, the replica's answer is parsed by httptools only to find where it ends, and its
bytes are written on as they come: a sized body as it is, a chunked one re-chunked chunk by
chunk (a stream of server-sent events reaches the client event by event); a websocket is passed
through as bytes once the replica accepted the upgrade. Every decision is the ASGI proxy's own,
called here (``ServiceProxy``: who the caller is, the ready replicas in round robin, 404/503 for
none, the forwarded headers without the caller's credentials), over the same source
(``proxy_source.WorkerSource``, the HTTP workers' snapshot of the plane), so both answer alike:
the behaviour tests run against both (``tests/integration/test_service_proxy_workers.py``).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import logging
import struct
from collections.abc import AsyncIterator, Sequence
from contextlib import suppress
from http import HTTPStatus
from typing import Any, cast
from urllib.parse import unquote

import httptools

from xpupool.server.service_caller import Caller
from xpupool.server.service_endpoints import Endpoint
from xpupool.server.service_proxy import (
    CONNECT_TIMEOUT_S,
    HOP_BY_HOP,
    REPLAYABLE_BYTES,
    RETRY_AFTER_S,
    ServiceProxy,
    forwarded_headers,
    proxy_route,
    upstream_path,
)
from xpupool.server.service_proxy_ws import FAILED, POLICY, TRY_AGAIN

log = logging.getLogger("xpupool.server")
READ_BYTES = 65536
MAX_HEAD_BYTES = 64 << 10  # a request's line and headers; past it the connection is dropped
BODY_HIGH_WATER = 1 << 20  # request bytes held before the client's socket is paused
MAX_IDLE_PER_ADDRESS = 64
WS_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # RFC 6455, 1.3
REASONS = {int(s): s.phrase.encode() for s in HTTPStatus}


class UpstreamError(Exception):
    """No answer started: refused, reset or closed first (tried on the next replica)."""


class _Request:
    """One request as the client's parser found it; its body arrives on :meth:`chunks`."""

    __slots__ = (
        "body",
        "complete",
        "headers",
        "keep_alive",
        "method",
        "more",
        "taken",
        "upgrade",
        "url",
    )

    def __init__(self) -> None:
        self.url = b""
        self.method = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.body: list[bytes] = []
        self.complete = False
        self.more = asyncio.Event()
        self.upgrade = b""  # bytes after the head of an upgrade (a websocket's first frames)
        self.taken = False  # some of the body was sent on: it cannot be sent again
        # read when the head is parsed: httptools says False once the message is complete
        self.keep_alive = False

    def length(self) -> int:
        """The body's length when sized (-1: chunked; 0: none)."""
        for key, value in self.headers:
            if key == b"transfer-encoding":
                return -1
            if key == b"content-length":
                return int(value) if value.isdigit() else -1
        return 0


class _Response:
    """The replica's answer, as its parser finds it."""

    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.headers: list[tuple[bytes, bytes]] = []
        self.head_done = False
        self.keep_alive = False  # as the head says (httptools forgets it at the message's end)
        self.body: list[bytes] = []
        self.complete = False

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        self.head_done = True
        self.keep_alive = self.parser.should_keep_alive()

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        self.complete = True


class _Upstream:
    """A keep-alive connection to one replica."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    def usable(self) -> bool:
        return not self.reader.at_eof() and not self.writer.is_closing()

    def close(self) -> None:
        with suppress(Exception):
            self.writer.close()


class RawPool:
    """Idle keep-alive connections to replicas, per (host, port)."""

    def __init__(self) -> None:
        self.idle: dict[tuple[str, int], list[_Upstream]] = {}

    async def take(self, address: tuple[str, int]) -> tuple[_Upstream, bool]:
        """An idle connection (True) or a new one (False); :class:`UpstreamError` if refused."""
        idle = self.idle.get(address)
        while idle:
            conn = idle.pop()
            if conn.usable():
                return conn, True
            conn.close()
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(*address, limit=READ_BYTES * 4), CONNECT_TIMEOUT_S
            )
        except (OSError, TimeoutError) as exc:
            raise UpstreamError(f"{type(exc).__name__}: {exc}") from None
        return _Upstream(reader, writer), False

    def give_back(self, address: tuple[str, int], conn: _Upstream) -> None:
        idle = self.idle.setdefault(address, [])
        if len(idle) < MAX_IDLE_PER_ADDRESS and conn.usable():
            idle.append(conn)
        else:
            conn.close()

    def close(self) -> None:
        for idle in self.idle.values():
            for conn in idle:
                conn.close()
        self.idle.clear()


def json_answer(
    status: int, reason: str, headers: Sequence[tuple[bytes, bytes]] = (), close: bool = False
) -> bytes:
    """An answer of the proxy's own, shaped as the ASGI proxy's (``{"detail": ...}``)."""
    body = json.dumps({"detail": reason}).encode()
    head = [b"HTTP/1.1 %d %s" % (status, REASONS.get(status, b"Error"))]
    head += [b"content-type: application/json", b"content-length: %d" % len(body)]
    head += [k + b": " + v for k, v in headers]
    if close:
        head.append(b"connection: close")
    return b"\r\n".join(head) + b"\r\n\r\n" + body


class ProxyServer:
    """The forwarder: ``proxy``'s decisions (over its source), this module's transport."""

    def __init__(self, proxy: ServiceProxy) -> None:
        self.proxy = proxy
        self.pool = RawPool()

    def protocol(self) -> ClientConnection:
        return ClientConnection(self)

    def close(self) -> None:
        self.pool.close()


class ClientConnection(asyncio.Protocol):
    """One client's connection: requests parsed as they come, answered one after another."""

    def __init__(self, server: ProxyServer) -> None:
        self.server = server
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.client: tuple[str, int] | None = None
        self.queue: asyncio.Queue[_Request | None] = asyncio.Queue()
        self.request: _Request | None = None
        self.head_bytes = 0
        self.gone = asyncio.Event()
        self.writable = asyncio.Event()
        self.writable.set()
        self.task: asyncio.Task[None] | None = None
        self.held = 0  # request body bytes received and not yet sent on

    # ------------------------------------------------------------------ asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is none by class
        peer = transport.get_extra_info("peername")
        self.client = (str(peer[0]), int(peer[1])) if peer else None
        self.task = asyncio.get_running_loop().create_task(self._serve())

    def connection_lost(self, exc: Exception | None) -> None:
        self.gone.set()
        self.writable.set()
        if self.request is not None:
            self.request.more.set()
        self.queue.put_nowait(None)

    def pause_writing(self) -> None:
        self.writable.clear()

    def resume_writing(self) -> None:
        self.writable.set()

    def data_received(self, data: bytes) -> None:
        if self.request is None or not self.request.headers:
            self.head_bytes += len(data)
            if self.head_bytes > MAX_HEAD_BYTES:
                self._drop()
                return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade as exc:
            request = self.request
            if request is not None:
                request.upgrade = data[exc.args[0] :]
                request.complete = True
                request.more.set()
            assert self.transport is not None
            self.transport.pause_reading()  # the websocket's own reader takes over
        except httptools.HttpParserError:
            assert self.transport is not None
            self.transport.write(json_answer(400, "malformed HTTP request", close=True))
            self._drop()

    def _drop(self) -> None:
        if self.transport is not None:
            self.transport.close()

    # ------------------------------------------------------------------ parser callbacks
    def on_message_begin(self) -> None:
        self.request = _Request()
        self.head_bytes = 0

    def on_url(self, url: bytes) -> None:
        assert self.request is not None
        self.request.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        assert self.request is not None
        self.request.headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        assert self.request is not None
        self.request.method = self.parser.get_method()
        self.request.keep_alive = self.parser.should_keep_alive()
        self.queue.put_nowait(self.request)

    def on_body(self, body: bytes) -> None:
        assert self.request is not None and self.transport is not None
        self.request.body.append(body)
        self.request.more.set()
        self.held += len(body)
        if self.held > BODY_HIGH_WATER:
            self.transport.pause_reading()

    def on_message_complete(self) -> None:
        assert self.request is not None
        self.request.complete = True
        self.request.more.set()

    # ------------------------------------------------------------------ serving
    async def _serve(self) -> None:
        transport = self.transport
        assert transport is not None
        try:
            while True:
                request = await self.queue.get()
                if request is None:
                    return
                keep = await self._one(request)
                if not keep or self.gone.is_set():
                    transport.close()
                    return
        except Exception:  # a bug must not leave the connection open and silent
            log.exception("service proxy: a request failed")
            transport.close()

    async def write(self, data: bytes) -> None:
        assert self.transport is not None
        if not self.gone.is_set():
            self.transport.write(data)
        if not self.writable.is_set():
            await self.writable.wait()

    async def body(self, request: _Request) -> AsyncIterator[bytes]:
        """The request's body as it comes (the client's socket resumed as it is taken)."""
        assert self.transport is not None
        while True:
            while request.body:
                request.taken = True
                chunk = request.body.pop(0)
                self.held -= len(chunk)
                if self.held <= BODY_HIGH_WATER:
                    self.transport.resume_reading()
                yield chunk
            if request.complete or self.gone.is_set():
                return
            request.more.clear()
            await request.more.wait()

    def scope(self, request: _Request) -> dict[str, Any] | None:
        """The request as the ASGI proxy's helpers read it (None: not a proxy path)."""
        url = httptools.parse_url(request.url)
        raw_path: bytes = url.path or b"/"
        path = unquote(raw_path.decode("latin-1"))
        found = proxy_route(path)
        if found is None:
            return None
        return {
            "type": "http",
            "method": request.method.decode("latin-1"),
            "path": path,
            "raw_path": raw_path,
            "query_string": url.query or b"",
            "headers": request.headers,
            "client": self.client,
            "scheme": "http",
            "path_params": {"name": found[0], "path": found[1]},
        }

    async def _one(self, request: _Request) -> bool:
        """Answer ``request``; whether the connection stays open for another."""
        keep = request.keep_alive
        scope = self.scope(request)
        if scope is None:
            await self._drain(request)
            await self.write(json_answer(404, "Not Found", close=not keep))
            return keep
        if request.upgrade or any(
            k == b"upgrade" and v.lower() == b"websocket" for k, v in request.headers
        ):
            await WebsocketSplice(self, request, scope).run()
            return False
        proxy = self.server.proxy
        headers, authorization = forwarded_headers(scope)
        who = await proxy.who(scope, authorization)
        name: str = scope["path_params"]["name"]
        if not isinstance(who, Caller):
            await self._drain(request)
            extra = [(b"www-authenticate", b"Bearer")] if who[0] == 401 else []
            await self.write(json_answer(who[0], who[1], extra, close=not keep))
            return keep
        endpoints = proxy.order(who.tenant, name)
        if not endpoints:
            await self._drain(request)
            status, why, again = await proxy.none_ready(who.tenant, name)
            retry = [(b"retry-after", str(RETRY_AFTER_S).encode())] if again else []
            await self.write(json_answer(status, why, retry, close=not keep))
            return keep
        started = asyncio.get_running_loop().time()
        endpoint: Endpoint | None = endpoints[0]
        status, keep_up = 499, False
        proxy.traffic.started(who.tenant, name, endpoint)
        try:
            status, endpoint, keep_up = await self._exchange(request, scope, headers, endpoints)
        finally:
            seconds = asyncio.get_running_loop().time() - started
            proxy.traffic.finished(who.tenant, name, endpoint, status, seconds)
        return keep and keep_up

    async def _drain(self, request: _Request) -> None:
        """Read a refused request's body to its end (a keep-alive connection goes on after)."""
        async for _ in self.body(request):
            pass

    async def _exchange(
        self,
        request: _Request,
        scope: dict[str, Any],
        headers: list[tuple[bytes, bytes]],
        endpoints: list[Endpoint],
    ) -> tuple[int, Endpoint | None, bool]:
        """Send the request to the first replica that takes it and stream the answer back:
        the status, the replica that answered, whether the client's connection may go on."""
        length = request.length()
        replayable = 0 <= length <= REPLAYABLE_BYTES
        content = b"".join([c async for c in self.body(request)]) if replayable else None
        head = self._head(request, scope, headers, length)
        proxy = self.server.proxy
        causes: list[str] = []
        at: Endpoint | None = endpoints[0]
        got: tuple[_Upstream, _Response] | None = None
        for i, endpoint in enumerate(endpoints):
            if i:
                proxy.traffic.moved(at, endpoint)
                at = endpoint
            address = (endpoint.host, endpoint.port)
            try:
                if content is not None:
                    got = await self._send(address, head, content)
                else:
                    got = await self._send_streamed(address, head, request, length)
                break
            except UpstreamError as exc:
                causes.append(f"{endpoint.host}:{endpoint.port}: {exc}")
                if request.taken and content is None:
                    break  # its body was sent on in part: it cannot be sent again
        if got is None:
            name = scope["path_params"]["name"]
            whole = request.complete and not request.body
            why = f"service {name}: no replica answered ({'; '.join(causes)})"
            await self.write(json_answer(502, why, close=not whole))
            return 502, at, whole
        conn, response = got
        status = response.parser.get_status_code()
        finished = await self._answer(address, conn, response, request.method)
        return (status if finished else 499), at, finished

    def _head(
        self,
        request: _Request,
        scope: dict[str, Any],
        headers: list[tuple[bytes, bytes]],
        length: int,
    ) -> list[bytes]:
        """The request line and headers for the replica, but for its ``host``."""
        target = upstream_path(scope, scope["path_params"]["name"])
        lines = [request.method + b" " + target + b" HTTP/1.1"]
        lines += [k + b": " + v for k, v in headers]
        if length < 0:
            lines.append(b"transfer-encoding: chunked")
        return lines

    async def _send(
        self, address: tuple[str, int], head: list[bytes], content: bytes
    ) -> tuple[_Upstream, _Response]:
        """Write a request with its body in hand (its length is the caller's header); read the
        answer's head. A reused connection the replica had closed meanwhile is replaced once."""
        host = b"host: %s:%d" % (address[0].encode(), address[1])
        data = b"\r\n".join([*head, host]) + b"\r\n\r\n" + content
        while True:
            conn, reused = await self.server.pool.take(address)
            try:
                conn.writer.write(data)
                return await self._read_head(conn)
            except UpstreamError:
                conn.close()
                if not reused:
                    raise

    async def _send_streamed(
        self, address: tuple[str, int], head: list[bytes], request: _Request, length: int
    ) -> tuple[_Upstream, _Response]:
        """Write a request whose body streams as it comes (chunked, or sized and long)."""
        conn, _ = await self.server.pool.take(address)
        host = b"host: %s:%d" % (address[0].encode(), address[1])
        try:
            conn.writer.write(b"\r\n".join([*head, host]) + b"\r\n\r\n")
            async for chunk in self.body(request):
                conn.writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk) if length < 0 else chunk)
                await conn.writer.drain()
            if length < 0:
                conn.writer.write(b"0\r\n\r\n")
            return await self._read_head(conn)
        except (OSError, UpstreamError) as exc:
            conn.close()
            raise UpstreamError(f"{type(exc).__name__}: {exc}") from None

    async def _read_head(self, conn: _Upstream) -> tuple[_Upstream, _Response]:
        response = _Response()
        try:
            while not response.head_done:
                data = await conn.reader.read(READ_BYTES)
                if not data:
                    raise UpstreamError("the replica closed the connection before answering")
                response.parser.feed_data(data)
                if response.head_done and response.parser.get_status_code() < 200:
                    response = _Response()  # 100 Continue: read on
        except (OSError, httptools.HttpParserError) as exc:
            raise UpstreamError(f"{type(exc).__name__}: {exc}") from None
        return conn, response

    async def _answer(
        self,
        address: tuple[str, int],
        conn: _Upstream,
        response: _Response,
        method: bytes,
    ) -> bool:
        """The replica's answer written on as it comes; False if either side went away first
        (the replica's connection is closed then, else it goes back to the pool)."""
        chunked = not any(k == b"content-length" for k, _ in response.headers)
        parser = response.parser
        status = parser.get_status_code()
        bodiless = method == b"HEAD" or status in (204, 304)
        lines = [b"HTTP/1.1 %d %s" % (status, REASONS.get(status, b"Unknown"))]
        lines += [k + b": " + v for k, v in response.headers if k not in HOP_BY_HOP]
        if chunked and not bodiless:
            lines.append(b"transfer-encoding: chunked")
        out = b"\r\n".join(lines) + b"\r\n\r\n"
        try:
            while True:
                if bodiless:
                    response.complete = True
                    response.body.clear()
                for chunk in response.body:
                    out += b"%x\r\n%s\r\n" % (len(chunk), chunk) if chunked else chunk
                response.body.clear()
                if response.complete:
                    if chunked and not bodiless:
                        out += b"0\r\n\r\n"
                    await self.write(out)
                    break
                await self.write(out)
                out = b""
                if self.gone.is_set():
                    conn.close()
                    return False
                data = await self._read_or_leave(conn)
                if data is None:
                    conn.close()
                    return False
                if not data:
                    if chunked and not any(k == b"transfer-encoding" for k, _ in response.headers):
                        response.complete = True  # an answer read to the close ends here
                        continue
                    raise ConnectionResetError("the replica closed the connection mid-answer")
                parser.feed_data(data)
        except (OSError, httptools.HttpParserError):
            conn.close()
            self._drop()
            return False
        if bodiless or conn.reader.at_eof() or not response.keep_alive:
            conn.close()
        else:
            self.server.pool.give_back(address, conn)
        return not self.gone.is_set()

    async def _read_or_leave(self, conn: _Upstream) -> bytes | None:
        """The replica's next bytes, or None when the client went away first."""
        read = asyncio.ensure_future(conn.reader.read(READ_BYTES))
        if read.done():
            return read.result()
        gone = asyncio.ensure_future(self.gone.wait())
        try:
            await asyncio.wait((read, gone), return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
        if read.done():
            return read.result()
        read.cancel()
        return None


class WebsocketSplice:
    """A websocket on a proxy path: the caller checked as for any request, the replica's
    handshake made with the client's own headers, and once it answers 101 the bytes flow both
    ways untouched. Refusals are the ASGI proxy's: a refused caller gets 403; no ready replica,
    a handshake then a close with 1013 (1008 for a service not found) naming why; no replica
    taking it, 1011."""

    def __init__(self, client: ClientConnection, request: _Request, scope: dict[str, Any]) -> None:
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
                conn, _ = await self.client.server.pool.take(address)
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

    async def _upstream_head(self, conn: _Upstream) -> bytes | None:
        """The replica's answer to the handshake, up to its blank line (frames after it stay in
        the reader); None when it closed or reset first."""
        try:
            return await asyncio.wait_for(conn.reader.readuntil(b"\r\n\r\n"), CONNECT_TIMEOUT_S)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
            return None

    async def splice(self, conn: _Upstream, answer: bytes) -> None:
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
