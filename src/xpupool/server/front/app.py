"""An HTTP worker's ASGI app: it takes the API's requests off the network for the plane.

A job submission (``POST /v1/jobs``, the request a busy pool gets most) goes to the plane as one
frame on the submission channel (``front/plane_side.py``): the token, the content type, the body
and the address it came from, answered with the status, headers and body the plane decided; for
a job it stored, the job as stored, which the worker renders as the route would. Every other
request is passed to the plane's own HTTP server on a Unix socket as it came (method, path,
query, headers and a streamed body) with the address it came from and the scheme it was spoken
in (``wire.CLIENT_HEADER``, ``wire.SCHEME_HEADER``), and its answer streamed back, so every
route, the dashboard and ``/metrics`` behave as without workers; the rate limits are the
plane's (``rate_limit.py``). The body size limit is applied here too, before anything is read
(``body_limit.py``), with the plane's settings; the header timeout and the connections per
address by the worker's own server (``connection_guard.py``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import httpx
from starlette.types import Message, Receive, Scope, Send

from xpupool.server.front.wire import (
    CLIENT_HEADER,
    JOB,
    SCHEME_HEADER,
    SUBMIT,
    FrameError,
    frame,
    read_frame,
    render,
)
from xpupool.server.job_views import Submitted

# not passed on: hop-by-hop headers, the address and scheme headers (the worker writes its own),
# and the plane's own date and server (the worker's server writes its own)
NOT_PASSED = frozenset(
    {
        CLIENT_HEADER,
        SCHEME_HEADER,
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
    }
)
NOT_ANSWERED = NOT_PASSED | {b"date", b"server"}
MAX_ANSWER = 64 << 20  # a submission's answer is a few kB; anything near this is a broken plane
T = TypeVar("T")
CONNECT_TRIES_S = 10.0  # how long a request waits for a plane that is still starting


def render_job(wire: bytes) -> bytes:
    """The 201 answer for a job the plane stored and sent as :data:`JOB`: the route's own view
    of it, rendered here rather than on the plane's core."""
    submitted = Submitted.from_wire(json.loads(wire))
    return submitted.view().model_dump_json(by_alias=True).encode()


class PlaneUnreachable(Exception):  # noqa: N818 - an answer (503), not a bug
    """The plane did not take the request: it is starting, stopping or gone."""


class SubmitClient:
    """Connections to the plane's submission channel, one request at a time on each: a request
    takes an idle one or opens one, and gives it back when answered."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def submit(
        self, authorization: str | None, content_type: str | None, body: bytes, client: str
    ) -> tuple[int, dict[str, str], bytes]:
        """(status, headers, body) of the plane's answer (``client``: the request's source
        address, for the plane's limits per address). Raises :class:`PlaneUnreachable` when
        no connection could be made, or the plane dropped it: the submission may or may not
        have been taken then, as with any request whose answer was lost."""
        reader, writer = await self._connection()
        try:
            meta = {
                "op": SUBMIT,
                "authorization": authorization,
                "content_type": content_type,
                "client": client,
            }
            writer.write(frame(meta, body))
            await writer.drain()
            head, answer = await read_frame(reader, MAX_ANSWER)
        except (OSError, asyncio.IncompleteReadError, FrameError) as exc:
            writer.close()
            raise PlaneUnreachable(str(exc) or type(exc).__name__) from None
        except BaseException:  # cancelled halfway: the next answer on it would not be ours
            writer.close()
            raise
        self.idle.append((reader, writer))
        headers = head.get("headers") or {}
        if head.get("render") == JOB:  # the job as stored: rendered here, off the plane's core
            answer = render_job(answer)
        return int(head["status"]), {str(k): str(v) for k, v in headers.items()}, answer

    async def _connection(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self.idle:
            return self.idle.pop()
        return await _retry_connect(lambda: asyncio.open_unix_connection(str(self.path)))

    def close(self) -> None:
        for _, writer in self.idle:
            writer.close()
        self.idle.clear()


async def _retry_connect(connect: Callable[[], Awaitable[T]]) -> T:
    """``connect()`` again while the plane is not listening yet (it is starting), for
    ``CONNECT_TRIES_S`` at most; nothing was sent before a connection is made."""
    deadline = asyncio.get_running_loop().time() + CONNECT_TRIES_S
    while True:
        try:
            return await connect()
        except (FileNotFoundError, ConnectionRefusedError, httpx.ConnectError) as exc:
            if asyncio.get_running_loop().time() > deadline:
                raise PlaneUnreachable(str(exc)) from None
            await asyncio.sleep(0.05)


class PlaneProxy:
    """Requests passed to the plane's HTTP server on its Unix socket, streamed both ways."""

    def __init__(self, path: Path) -> None:
        transport = httpx.AsyncHTTPTransport(uds=str(path))
        # no read timeout: a log read or a long answer takes what it takes, as without workers
        self.client = httpx.AsyncClient(transport=transport, timeout=httpx.Timeout(None))

    async def forward(self, scope: Scope, receive: Receive, send: Send) -> None:
        query = scope.get("query_string", b"")
        path = scope.get("raw_path") or scope["path"].encode()
        url = httpx.URL(
            scheme="http", host="plane", raw_path=path + (b"?" + query if query else b"")
        )
        headers = [(k, v) for k, v in scope["headers"] if k not in NOT_PASSED]
        headers.append((CLIENT_HEADER, client_host(scope).encode("latin-1")))
        headers.append((SCHEME_HEADER, str(scope.get("scheme", "http")).encode("latin-1")))
        request = httpx.Request(scope["method"], url, headers=headers, content=_body(receive))
        try:
            response = await _retry_connect(lambda: self.client.send(request, stream=True))
        except (PlaneUnreachable, httpx.TransportError) as exc:
            await send_unreachable(send, str(exc))
            return
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": response.status_code,
                    "headers": [
                        (k.lower(), v)
                        for k, v in response.headers.raw
                        if k.lower() not in NOT_ANSWERED
                    ],
                }
            )
            async for chunk in response.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        finally:
            await response.aclose()

    async def close(self) -> None:
        await self.client.aclose()


async def _body(receive: Receive) -> AsyncIterator[bytes]:
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return  # the client went away
        chunk = message.get("body", b"")
        if chunk:
            yield chunk
        if not message.get("more_body", False):
            return


async def read_body(receive: Receive) -> bytes:
    return b"".join([chunk async for chunk in _body(receive)])


async def send_unreachable(send: Send, why: str) -> None:
    body = {"field": None, "value": None, "reason": f"the control plane is not answering: {why}"}
    await send_json(send, 503, render(body), {})


async def send_json(send: Send, status: int, body: bytes, headers: dict[str, str]) -> None:
    raw = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
    if not any(k == b"content-type" for k, _ in raw):
        raw.append((b"content-type", b"application/json"))
    raw.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


class FrontApp:
    """The worker's ASGI app (wrapped in ``BodyLimit`` by ``front/main.py``)."""

    def __init__(self, plane_http: Path, channel: Path) -> None:
        self.plane_http = plane_http
        self.channel = channel
        self.submits: SubmitClient | None = None
        self.proxy: PlaneProxy | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return  # no websockets in this API
        assert self.submits is not None and self.proxy is not None
        if scope["method"] == "POST" and scope["path"] == "/v1/jobs":
            await self._submit(scope, receive, send, self.submits)
        else:
            await self.proxy.forward(scope, receive, send)

    async def _submit(
        self, scope: Scope, receive: Receive, send: Send, submits: SubmitClient
    ) -> None:
        authorization = _header(scope, b"authorization")
        content_type = _header(scope, b"content-type")
        body = await read_body(receive)
        try:
            status, extra, answer = await submits.submit(
                authorization, content_type, body, client_host(scope)
            )
        except PlaneUnreachable as exc:
            await send_unreachable(send, str(exc))
            return
        await send_json(send, status, answer, extra)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message: Message = await receive()
            if message["type"] == "lifespan.startup":
                self.submits = SubmitClient(self.channel)
                self.proxy = PlaneProxy(self.plane_http)
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self.submits is not None:
                    self.submits.close()
                if self.proxy is not None:
                    await self.proxy.close()
                await send({"type": "lifespan.shutdown.complete"})
                return


def client_host(scope: Scope) -> str:
    """The address the request came from ('' when the server does not know it)."""
    client = scope.get("client")
    return str(client[0]) if client else ""


def _header(scope: Scope, name: bytes) -> str | None:
    """The first ``name`` header, as Starlette reads it."""
    for key, value in scope["headers"]:
        if key == name:
            return str(value.decode("latin-1"))
    return None
