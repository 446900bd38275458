"""The stable endpoint of a service: ``/v1/services/NAME/proxy/PATH``, every method, forwarded to
one of the service's ready replicas (``plane.service_endpoints``), the answer streamed back chunk
by chunk as it comes (a model's server-sent events reach the client event by event); a websocket
upgrade on the same path is passed through (``service_proxy_ws.py``).

Which replica: round robin over the ready ones. A connection refused or reset before the
replica answered a byte is tried on the next one, each at most once, then answered 502 naming
the cause; no ready replica: 503 with ``Retry-After`` (without it, naming the state, for a
service its tenant stopped), but only for a service the caller's tenant has (a name it has not
is 404: a client that retries 503s, as OpenAI's do, must not retry a
typo for ever; the store is read only on that path). Who may call: ``service_access.py``; the
caller's credentials (``Authorization``, the dashboard's cookie, any ``X-Xpupool-*`` header) never
reach the replica. The replica's own key, if it wants one (an OpenAI-compatible server started
with ``--api-key``), is sent as ``X-Upstream-Authorization`` and reaches it as
``Authorization``. Hop-by-hop headers are dropped; ``X-Forwarded-For``, ``-Proto`` and ``-Host``
are set.

A proxied request passes no router, no dependency and no store read once its token is cached:
one raw ASGI app, matched before every other route, with pooled keep-alive connections to the
replicas (``upstream_http.py``; issue 47 asks for little added latency: docs/benchmarks.md).
A request body with a length up to :data:`REPLAYABLE_BYTES` is read before it is sent (so a
retry can send it again); a longer or chunked one is streamed, and retried only if the refused
attempt had not started reading it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import suppress
from typing import Protocol, TypeVar

from starlette.types import ASGIApp, Receive, Scope, Send

from xpupool.server.client_address import client_address
from xpupool.server.schemas.services import ServiceState
from xpupool.server.service_caller import Caller
from xpupool.server.service_endpoints import Endpoint
from xpupool.server.service_traffic import ProxyTraffic
from xpupool.server.upstream_http import UpstreamError, UpstreamPool, UpstreamResponse

PREFIX = "/v1/services/{name}/proxy"
REPLAYABLE_BYTES = 1 << 20
UPSTREAM_AUTHORIZATION = b"x-upstream-authorization"
CONNECT_TIMEOUT_S = 5.0
RETRY_AFTER_S = 2
HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
    }
)
# the caller's credentials, and what the proxy writes itself
NOT_FORWARDED = HOP_BY_HOP | {
    b"authorization",
    UPSTREAM_AUTHORIZATION,
    b"host",
    b"x-forwarded-for",
    b"x-forwarded-proto",
    b"x-forwarded-host",
}
NOT_ANSWERED = HOP_BY_HOP | {b"date", b"server"}
T = TypeVar("T")


def forwarded_headers(scope: Scope) -> tuple[list[tuple[bytes, bytes]], str | None]:
    """The headers the replica gets, and the caller's ``Authorization`` (checked, not sent)."""
    out: list[tuple[bytes, bytes]] = []
    authorization: str | None = None
    upstream: bytes | None = None
    forwarded_for: bytes | None = None
    host = b""
    named: set[bytes] = set()  # what the caller's Connection header names: hop-by-hop too
    for key, value in scope["headers"]:
        if key == b"connection":
            named.update(v.strip().lower() for v in value.split(b","))
        elif key == b"authorization":
            authorization = value.decode("latin-1")
        elif key == UPSTREAM_AUTHORIZATION:
            upstream = value
        elif key == b"x-forwarded-for":
            forwarded_for = value
        elif key == b"host":
            host = value
        elif key == b"cookie":
            kept = [c for c in value.split(b";") if not c.strip().startswith(b"xpupool")]
            if kept:
                out.append((key, b";".join(kept).strip()))
            continue
        if key not in NOT_FORWARDED and not key.startswith(b"x-xpupool"):
            out.append((key, value))
    if named:
        out = [(k, v) for k, v in out if k not in named]
    if upstream is not None:
        out.append((b"authorization", upstream))
    source = (client_address(scope) or "").encode("latin-1")
    out.append((b"x-forwarded-for", forwarded_for + b", " + source if forwarded_for else source))
    out.append((b"x-forwarded-proto", str(scope.get("scheme", "http")).encode("latin-1")))
    if host:
        out.append((b"x-forwarded-host", host))
    return out, authorization


def upstream_path(scope: Scope, name: str) -> bytes:
    """The path and query the replica gets: what follows ``/proxy``, as the client encoded it."""
    raw: bytes = scope.get("raw_path") or scope["path"].encode()
    prefix = PREFIX.format(name=name).encode()
    rest = (
        raw[len(prefix) :]
        if raw.startswith(prefix)
        else b"/" + scope["path_params"]["path"].encode()
    )
    query: bytes = scope.get("query_string", b"")
    return (rest or b"/") + (b"?" + query if query else b"")


async def answer(
    send: Send, status: int, reason: str, headers: Sequence[tuple[bytes, bytes]] = ()
) -> None:
    """An error answer of the proxy's own, shaped as the API's (``{"detail": ...}``)."""
    body = json.dumps({"detail": reason}).encode()
    start = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        *headers,
    ]
    await send({"type": "http.response.start", "status": status, "headers": start})
    await send({"type": "http.response.body", "body": body})


def proxy_route(path: str) -> tuple[str, str] | None:
    """(service name, the rest of the path) when ``path`` is a service's proxy path."""
    if not path.startswith("/v1/services/"):
        return None
    name, _, rest = path[len("/v1/services/") :].partition("/")
    if not name or not (rest == "proxy" or rest.startswith("proxy/")):
        return None
    return name, rest[len("proxy/") :]


class ProxyFirst:
    """ASGI middleware: a service's proxy path goes to the proxy before anything of the API's
    runs (``app.py`` puts it outermost). The API's rate
    limits are per API credential: a service token is none, and a service's callers are the
    service's load, which its replicas and their scaling answer; the API's body limit does not
    apply either (the replica decides what it takes)."""

    def __init__(self, app: ASGIApp, proxy: ServiceProxy) -> None:
        self.app = app
        self.proxy = proxy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            found = proxy_route(scope["path"])
            if found is not None:
                scope = {**scope, "path_params": {"name": found[0], "path": found[1]}}
                await self.proxy(scope, receive, send)
                return
        await self.app(scope, receive, send)


class ProxySource(Protocol):
    """What the proxy asks of where it runs: who a token is, a service's ready endpoints, and
    the stored state of a tenant's service of a name (None: it has none). The plane answers from its own books
    (``service_access.PlaneSource``); the proxy process from the snapshot it polls from the plane
    (``front/proxy_source.py``). :meth:`who` is always asked first."""

    async def who(self, authorization: str | None) -> Caller | tuple[int, str]: ...

    def ready(self, tenant: str, name: str) -> Sequence[Endpoint]: ...

    async def state(self, tenant: str, name: str) -> str | None: ...


class ServiceProxy:
    """The ASGI app of a service's proxy path (:class:`ProxyFirst` routes to it), in the plane
    or in the proxy process: ``source`` says which, ``traffic`` counts what it forwards."""

    def __init__(self, source: ProxySource, traffic: ProxyTraffic) -> None:
        self.source = source
        self.traffic = traffic
        self._turn: dict[tuple[str, str], int] = {}  # round robin: the next index per service
        self.upstream = UpstreamPool(CONNECT_TIMEOUT_S)  # keep-alive connections to replicas

    async def close(self) -> None:
        self.upstream.close()

    async def who(self, scope: Scope, authorization: str | None) -> Caller | tuple[int, str]:
        """The caller, or the refusal; a service token of another service, and another tenant's
        service, are 404 alike: nothing says whether the name exists elsewhere."""
        name: str = scope["path_params"]["name"]
        found = await self.source.who(authorization)
        if isinstance(found, Caller) and found.service is not None and found.service != name:
            return 404, f"service {name} not found"
        return found

    async def none_ready(self, tenant: str, name: str) -> tuple[int, str, bool]:
        """The answer when ``tenant``'s ``name`` has no ready endpoint: 503 for a service it
        has (starting, restarting; one it stopped, said so), 404 for a name it has not; another
        tenant's service is "not found" alike; and whether to ask again soon (``Retry-After``:
        not for a stopped service, which only its tenant starts again)."""
        state = await self.source.state(tenant, name)
        if state is None:
            return 404, f"service {name} not found", False
        if state == ServiceState.STOPPED.value:
            why = f"service {name} is stopped: start it (xpupool service start {name})"
            return 503, why, False
        return 503, f"service {name} has no ready replica", True

    def order(self, tenant: str, name: str) -> list[Endpoint]:
        """The ready endpoints, starting at this service's turn."""
        ready = self.source.ready(tenant, name)
        if not ready:
            return []
        key = (tenant, name)
        turn = self._turn.get(key, 0) % len(ready)
        self._turn[key] = turn + 1
        return [*ready[turn:], *ready[:turn]]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            from xpupool.server.service_proxy_ws import forward_websocket

            await forward_websocket(self, scope, receive, send)
            return
        headers, authorization = forwarded_headers(scope)
        who = await self.who(scope, authorization)
        if not isinstance(who, Caller):
            extra = [(b"www-authenticate", b"Bearer")] if who[0] == 401 else []
            await answer(send, who[0], who[1], extra)
            return
        name: str = scope["path_params"]["name"]
        endpoints = self.order(who.tenant, name)
        if not endpoints:
            status, why, again = await self.none_ready(who.tenant, name)
            retry = [(b"retry-after", str(RETRY_AFTER_S).encode())] if again else []
            await answer(send, status, why, retry)
            return
        started = asyncio.get_running_loop().time()
        status = 499  # the client went away before an answer started
        endpoint: Endpoint | None = endpoints[0]
        self.traffic.started(who.tenant, name, endpoint)
        try:
            status, endpoint = await self._exchange(scope, receive, send, headers, endpoints)
        finally:
            seconds = asyncio.get_running_loop().time() - started
            self.traffic.finished(who.tenant, name, endpoint, status, seconds)

    async def _exchange(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        headers: list[tuple[bytes, bytes]],
        endpoints: list[Endpoint],
    ) -> tuple[int, Endpoint | None]:
        """Send the request to the first endpoint that takes it and stream its answer back; the
        status sent and the endpoint that answered (None: none did)."""
        body = _Body(scope, receive)
        content = await body.content()
        path = upstream_path(scope, scope["path_params"]["name"])

        async def attempt(endpoint: Endpoint) -> UpstreamResponse:
            address = (endpoint.host, endpoint.port)
            return await self.upstream.request(address, scope["method"], path, headers, content)

        def again() -> bool:
            nonlocal content
            if not body.replayable():
                return False
            content = body.again()
            return True

        response, at, causes = await in_turn(self.traffic, endpoints, attempt, again)
        if response is None:
            name = scope["path_params"]["name"]
            await answer(send, 502, f"service {name}: no replica answered ({'; '.join(causes)})")
            return 502, at
        try:
            finished = await _stream_back(response, send, body)
        finally:
            response.close()
        return (response.status if finished else 499), at


async def in_turn(
    traffic: ProxyTraffic,
    endpoints: Sequence[Endpoint],
    attempt: Callable[[Endpoint], Awaitable[T]],
    again: Callable[[], bool],
) -> tuple[T | None, Endpoint, list[str]]:
    """``attempt`` on each endpoint in turn until one answers (raises no :class:`UpstreamError`):
    its answer (None: none answered), the endpoint the request is counted at (the request's
    count in ``traffic`` moves with each try), and why each refused. After a refusal ``again()``
    says whether the request may be sent to the next one (its body can be sent again)."""
    causes: list[str] = []
    at = endpoints[0]
    for i, endpoint in enumerate(endpoints):
        if i:
            traffic.moved(at, endpoint)
            at = endpoint
        try:
            return await attempt(endpoint), at, causes
        except UpstreamError as exc:
            causes.append(f"{endpoint.host}:{endpoint.port}: {exc}")
            if not again():
                break
    return None, at, causes


class _Body:
    """The request's body: read in full when short and sized (so it can be sent again), else
    streamed as it comes; and whether the client went away."""

    def __init__(self, scope: Scope, receive: Receive) -> None:
        self.receive = receive
        self.length = 0  # HTTP/1.1: no length and not chunked is no body
        for key, value in scope["headers"]:
            if key == b"content-length":
                try:
                    self.length = int(value)
                except ValueError:
                    self.length = -1
            elif key == b"transfer-encoding":
                self.length = -1  # chunked: streamed, of a length known at its end
        self.buffered: bytes | None = None
        self.streaming = False
        self.done = asyncio.Event()  # read to its end: what comes next is a disconnect
        self.gone = False

    async def content(self) -> bytes | AsyncIterator[bytes]:
        if 0 <= self.length <= REPLAYABLE_BYTES:
            parts = [chunk async for chunk in self._chunks()]
            self.buffered = b"".join(parts)
            return self.buffered
        return self._stream()

    def replayable(self) -> bool:
        return self.buffered is not None or not self.streaming

    def again(self) -> bytes | AsyncIterator[bytes]:
        return self.buffered if self.buffered is not None else self._stream()

    async def _stream(self) -> AsyncIterator[bytes]:
        self.streaming = True
        async for chunk in self._chunks():
            yield chunk

    async def _chunks(self) -> AsyncIterator[bytes]:
        try:
            while True:
                message = await self.receive()
                if message["type"] != "http.request":
                    self.gone = True
                    return
                chunk = message.get("body", b"")
                if chunk:
                    yield chunk
                if not message.get("more_body", False):
                    return
        finally:
            self.done.set()

    async def disconnected(self) -> None:
        """Return when the client goes away (after its body was read)."""
        await self.done.wait()
        while not self.gone:
            if (await self.receive())["type"] == "http.disconnect":
                self.gone = True


async def _stream_back(response: UpstreamResponse, send: Send, body: _Body) -> bool:
    """The replica's answer sent on as it comes; False if the client went away first (the
    replica's answer is then dropped, its connection closed)."""

    async def pump() -> None:
        await send(
            {
                "type": "http.response.start",
                "status": response.status,
                "headers": [(k, v) for k, v in response.headers if k not in NOT_ANSWERED],
            }
        )
        async for chunk in response.chunks():
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    sized = any(k == b"content-length" for k, _ in response.headers)
    if sized or not body.done.is_set():
        # an answer of known length ends by itself (uvicorn drops what is sent to a client that
        # went away), and the request's own body, still streaming, cannot be watched beside
        # it: only an open-ended answer (a stream of events) is watched for the client leaving,
        # which saves two tasks on every other request
        await pump()
        return True
    sending = asyncio.ensure_future(pump())
    watching = asyncio.ensure_future(body.disconnected())
    try:
        await asyncio.wait((sending, watching), return_when=asyncio.FIRST_COMPLETED)
    except BaseException:  # the server stops: neither outlives this request
        sending.cancel()
        watching.cancel()
        raise
    watching.cancel()
    if not sending.done():
        sending.cancel()
        with suppress(asyncio.CancelledError):
            await sending
        return False
    sending.result()  # raises what the pump raised
    return True
