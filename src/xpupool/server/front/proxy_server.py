"""The service proxy's own process (``xpupool up --proxy-port``): an HTTP/1.1 forwarder written at
the level of asyncio's Protocol with httptools' parsers, for the least work per proxied request.

The ASGI proxy (``service_proxy.py``) pays, per request, for uvicorn's ASGI messages and h11's
framing of the replica's answer on the way back (docs/benchmarks.md). Here a request's head is
parsed once, the replica's answer is parsed by httptools only to find where it ends, and its
bytes are written on as they come: a sized body as it is, a chunked one re-chunked chunk by
chunk (a stream of server-sent events reaches the client event by event); a websocket is passed
through as bytes once the replica accepted the upgrade (``proxy_server_ws.py``). Every decision
is the ASGI proxy's own, called here (``ServiceProxy``: who the caller is, the ready replicas in
round robin, 404/503 for none, the forwarded headers without the caller's credentials, the
replicas tried in turn), over the same source
(``proxy_source.WorkerSource``, the process's snapshot of the plane), so both answer alike
(``tests/integration/test_service_proxy_workers.py``).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from http import HTTPStatus
from typing import Any, cast
from urllib.parse import unquote

import httptools

from xpupool.server.client_address import address_key
from xpupool.server.connection_guard import ConnectionLimits, too_many_connections
from xpupool.server.service_caller import Caller
from xpupool.server.service_endpoints import Endpoint
from xpupool.server.service_proxy import (
    HOP_BY_HOP,
    REPLAYABLE_BYTES,
    RETRY_AFTER_S,
    ServiceProxy,
    forwarded_headers,
    in_turn,
    proxy_route,
    upstream_path,
)
from xpupool.server.upstream_http import UpstreamConnection, UpstreamError, UpstreamPool

log = logging.getLogger("xpupool.server")
READ_BYTES = 65536
MAX_HEAD_BYTES = 64 << 10  # a request's line and headers; past it the connection is dropped
BODY_HIGH_WATER = 1 << 20  # request bytes held before the client's socket is paused
REASONS = {int(s): s.phrase.encode() for s in HTTPStatus}


class ClientRequest:
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

    def __init__(self, proxy: ServiceProxy, limits: ConnectionLimits | None = None) -> None:
        self.proxy = proxy
        self.pool: UpstreamPool = proxy.upstream  # its keep-alive connections, written raw here
        # the API's limits on a client's connections (connection_guard.py), held here alike
        self.limits = limits or ConnectionLimits()
        self.open_by_address: Counter[str] = Counter()

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
        self.queue: asyncio.Queue[ClientRequest | None] = asyncio.Queue()
        self.request: ClientRequest | None = None
        self.head_bytes = 0
        self.awaiting_head = True  # no whole head since the last answer (or the connection)
        self.timer: asyncio.TimerHandle | None = None
        self.counted_as: str | None = None  # the address this connection is counted under
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
        if self.client is not None:
            self.counted_as = address_key(self.client[0])
            counts, most = self.server.open_by_address, self.server.limits.per_address
            counts[self.counted_as] += 1
            if most and counts[self.counted_as] > most:
                self.transport.write(too_many_connections(most))
                self._drop()
                return
        self.task = asyncio.get_running_loop().create_task(self._serve())
        self._await_head()

    def _await_head(self) -> None:
        """Wait for the next request's head: dropped unless it is whole within the limits'
        header timeout (a client that opens connections and sends nothing, or a header a byte
        at a time, holds none for long)."""
        self.awaiting_head, self.head_bytes = True, 0
        if self.timer is not None:
            self.timer.cancel()
        wait = self.server.limits.header_timeout_s
        self.timer = asyncio.get_running_loop().call_later(wait, self._head_late)

    def _head_late(self) -> None:
        if self.awaiting_head:
            self._drop()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.timer is not None:
            self.timer.cancel()
        if self.counted_as is not None:
            counts = self.server.open_by_address
            counts[self.counted_as] -= 1
            if counts[self.counted_as] <= 0:
                del counts[self.counted_as]
            self.counted_as = None
        self.gone.set()
        if self.task is None:
            return  # refused: nothing was started
        self.writable.set()
        if self.request is not None:
            self.request.more.set()
        self.queue.put_nowait(None)

    def pause_writing(self) -> None:
        self.writable.clear()

    def resume_writing(self) -> None:
        self.writable.set()

    def data_received(self, data: bytes) -> None:
        # Only bytes read while no whole head has come count against the head limit: one read
        # may carry a head and much of its body (a loaded machine reads late), and that body is
        # no part of the head.
        waiting = self.awaiting_head
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
            return
        if waiting and self.awaiting_head:  # still no whole head: what it holds so far counts
            self.head_bytes += len(data)
            if self.head_bytes > MAX_HEAD_BYTES:
                self._drop()

    def _drop(self) -> None:
        if self.transport is not None:
            self.transport.close()

    # ------------------------------------------------------------------ parser callbacks
    def on_message_begin(self) -> None:
        self.request = ClientRequest()

    def on_url(self, url: bytes) -> None:
        assert self.request is not None
        self.request.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        assert self.request is not None
        self.request.headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        assert self.request is not None
        self.awaiting_head = False
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
                if self.queue.empty():
                    self._await_head()
        except Exception:  # a bug must not leave the connection open and silent
            log.exception("service proxy: a request failed")
            transport.close()

    async def write(self, data: bytes) -> None:
        assert self.transport is not None
        if not self.gone.is_set():
            self.transport.write(data)
        if not self.writable.is_set():
            await self.writable.wait()

    async def body(self, request: ClientRequest) -> AsyncIterator[bytes]:
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

    def scope(self, request: ClientRequest) -> dict[str, Any] | None:
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

    async def _one(self, request: ClientRequest) -> bool:
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
            from xpupool.server.front.proxy_server_ws import WebsocketSplice

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

    async def _drain(self, request: ClientRequest) -> None:
        """Read a refused request's body to its end (a keep-alive connection goes on after)."""
        async for _ in self.body(request):
            pass

    async def _exchange(
        self,
        request: ClientRequest,
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

        async def attempt(endpoint: Endpoint) -> tuple[UpstreamConnection, _Response]:
            address = (endpoint.host, endpoint.port)
            if content is not None:
                return await self._send(address, head, content)
            return await self._send_streamed(address, head, request, length)

        def again() -> bool:  # not once a body was sent on in part
            return not (request.taken and content is None)

        got, at, causes = await in_turn(self.server.proxy.traffic, endpoints, attempt, again)
        if got is None:
            name = scope["path_params"]["name"]
            whole = request.complete and not request.body
            why = f"service {name}: no replica answered ({'; '.join(causes)})"
            await self.write(json_answer(502, why, close=not whole))
            return 502, at, whole
        conn, response = got
        status = response.parser.get_status_code()
        finished = await self._answer((at.host, at.port), conn, response, request.method)
        return (status if finished else 499), at, finished

    def _head(
        self,
        request: ClientRequest,
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
    ) -> tuple[UpstreamConnection, _Response]:
        """Write a request with its body in hand (its length is the caller's header); read the
        answer's head. A reused connection the replica had closed meanwhile is replaced once."""
        host = b"host: %s:%d" % (address[0].encode(), address[1])
        data = b"\r\n".join([*head, host]) + b"\r\n\r\n" + content
        while True:
            conn, reused = await self.server.pool.connection(address)
            try:
                conn.writer.write(data)
                return await self._read_head(conn)
            except UpstreamError:
                conn.close()
                if not reused:
                    raise

    async def _send_streamed(
        self, address: tuple[str, int], head: list[bytes], request: ClientRequest, length: int
    ) -> tuple[UpstreamConnection, _Response]:
        """Write a request whose body streams as it comes (chunked, or sized and long)."""
        conn, _ = await self.server.pool.connection(address)
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

    async def _read_head(self, conn: UpstreamConnection) -> tuple[UpstreamConnection, _Response]:
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
        conn: UpstreamConnection,
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

    async def _read_or_leave(self, conn: UpstreamConnection) -> bytes | None:
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
