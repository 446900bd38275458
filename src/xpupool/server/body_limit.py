"""The request body size limit: ASGI middleware in front of everything else.

FastAPI reads a body whole (and parses its JSON) before it looks at the token, so without a
limit anyone who can reach the port can make the server hold any number of bytes. Here a request
that declares a ``Content-Length`` over the limit is answered 413 before a byte of its body is
read, and one that streams (chunked, no length) is answered 413 as soon as the bytes received
pass the limit; the connection is then closed rather than drained. Both happen before
authentication, since no route has run. Routes that need more (an agent's log upload) name a
larger limit by method and path. The Kubernetes extender's verbs sit behind the same middleware
with a limit of their own (``k8s/extender/http_app.py``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

from starlette.types import ASGIApp, Message, Receive, Scope, Send

DEFAULT_MAX_BODY = 1 << 20
_UNITS = {"": 1, "k": 1000, "ki": 1 << 10, "m": 1000**2, "mi": 1 << 20, "g": 1000**3, "gi": 1 << 30}


def parse_size(text: str) -> int:
    """Bytes from '1048576', '512Ki', '1Mi', '8M' (binary Ki/Mi/Gi, decimal k/M/G; a trailing
    'B' is accepted). Raises ValueError naming the text."""
    found = re.fullmatch(r"\s*(\d+)\s*([kKmMgG]i?)?[bB]?\s*", text)
    if found is None:
        raise ValueError(f"{text!r}: use bytes or a size such as 512Ki, 1Mi, 8M")
    return int(found.group(1)) * _UNITS[(found.group(2) or "").lower()]


@dataclass(frozen=True, slots=True)
class RouteLimit:
    """A larger (or smaller) limit for requests whose method is ``method`` and whose path matches
    ``path`` (a regular expression matched against the whole path)."""

    method: str
    path: re.Pattern[str]
    max_bytes: int


MAX_LOG_CHUNK = 1 << 20  # bytes of a replica's output an agent sends in one upload, at most
LOG_UPLOAD = RouteLimit(
    "POST",
    re.compile(r"/v1/agent/nodes/[^/]+/jobs/[^/]+/replicas/[^/]+/logs"),
    MAX_LOG_CHUNK + 65536,
)  # an agent ships a replica's output in chunks of up to MAX_LOG_CHUNK, whatever --max-body is


SERVER_SETTING = "xpupool up --max-body"


class BodyLimit:
    """Refuse request bodies over ``max_bytes`` (413), counting what arrives, not what is said.
    ``setting`` names where the limit comes from, in the refusal's reason."""

    def __init__(
        self,
        app: ASGIApp,
        max_bytes: int,
        routes: Sequence[RouteLimit] = (),
        setting: str = SERVER_SETTING,
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.routes = tuple(routes)
        self.setting = setting

    def limit_for(self, method: str, path: str) -> int:
        for route in self.routes:
            if route.method == method and route.path.fullmatch(path):
                return route.max_bytes
        return self.max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limit_for(scope["method"], scope["path"])
        declared = _content_length(scope)
        if declared is not None and declared > limit:
            await _refuse(send, limit, declared, self.setting)
            return
        received = 0
        refused = False
        started = False

        async def counted_receive() -> Message:
            nonlocal received, refused
            if refused:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    refused = True
                    if not started:
                        await _refuse(send, limit, None, self.setting)
                    return {"type": "http.disconnect"}  # the app stops reading; we answered
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if refused:
                return  # the 413 went out; what the app makes of the disconnect is dropped
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        await self.app(scope, counted_receive, guarded_send)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def _refuse(send: Send, limit: int, declared: int | None, setting: str) -> None:
    """413 with an error body, and ``Connection: close``: the rest of the body is not read."""
    reason = f"the request body is over the limit of {limit} bytes ({setting})"
    body = json.dumps({"field": "body", "value": declared, "reason": reason}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
