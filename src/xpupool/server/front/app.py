"""An HTTP worker's ASGI app: it takes the API's requests off the network for the plane.

A job submission (``POST /v1/jobs``, the request a busy pool gets most) is read and validated
here by FastAPI (``front/submit_route.py``) and goes to the plane as one frame on the submission
channel (``front/plane_side.py``): the validated job, or the refusal, with the credentials and the
address it came from, answered with the status, headers and body the plane decided; for a job it
stored, the job as stored, which the worker renders as the route would. A service's proxy path
(``/v1/services/NAME/proxy/...``, websockets included) is served here, by the plane's own proxy
app over the endpoints and token checks the worker polls from the plane
(``front/proxy_source.py``): it never waits for the plane's event loop. Every other
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
import time
from collections.abc import AsyncIterator
from contextlib import suppress
from pathlib import Path

import httpx
from starlette.types import Message, Receive, Scope, Send

from xpupool.server.front.channel_client import (
    PlaneUnreachable,
    SubmitClient,
    retry_connect,
)
from xpupool.server.front.proxy_source import WorkerSource
from xpupool.server.front.submit_route import submission_app, unreachable
from xpupool.server.front.wire import CLIENT_HEADER, SCHEME_HEADER
from xpupool.server.service_proxy import ServiceProxy
from xpupool.server.service_traffic import ProxyTraffic

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
            response = await retry_connect(lambda: self.client.send(request, stream=True))
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


async def send_unreachable(send: Send, why: str) -> None:
    answer = unreachable(why)
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(answer.body)).encode()),
    ]
    await send({"type": "http.response.start", "status": answer.status, "headers": headers})
    await send({"type": "http.response.body", "body": answer.body})


class FrontApp:
    """The worker's ASGI app (wrapped in ``BodyLimit`` by ``front/main.py``)."""

    def __init__(self, plane_http: Path, channel: Path) -> None:
        self.plane_http = plane_http
        self.channel = channel
        self.submits: SubmitClient | None = None
        self.proxy: PlaneProxy | None = None
        self.submission = submission_app(self._submits)
        self.source = WorkerSource(channel, ProxyTraffic(time.monotonic))
        # the services' proxy paths, which ``ProxyFirst`` routes here before anything else
        self.services = ServiceProxy(self.source, self.source.traffic)
        self.poller: asyncio.Task[None] | None = None

    def _submits(self) -> SubmitClient:
        assert self.submits is not None, "the lifespan has started"
        return self.submits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] == "websocket":  # not a service's proxy path: the API has none
            if (await receive())["type"] == "websocket.connect":
                await send({"type": "websocket.close", "code": 1008})
            return
        if scope["type"] != "http":
            return
        assert self.submits is not None and self.proxy is not None
        if scope["method"] == "POST" and scope["path"] == "/v1/jobs":
            await self.submission(scope, receive, send)
        else:
            await self.proxy.forward(scope, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message: Message = await receive()
            if message["type"] == "lifespan.startup":
                self.submits = SubmitClient(self.channel)
                self.proxy = PlaneProxy(self.plane_http)
                self.poller = asyncio.get_running_loop().create_task(self.source.run())
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self.poller is not None:
                    self.poller.cancel()
                    with suppress(asyncio.CancelledError):
                        await self.poller
                self.source.close()
                await self.services.close()
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
