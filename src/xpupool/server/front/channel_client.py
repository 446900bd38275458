"""A worker's end of the submission channel (``front/plane_side.py`` is the plane's): frames out,
answers back, one request at a time on each connection."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx

from xpupool.server.front.wire import JOB, REFUSE, SUBMIT, FrameError, frame, read_frame
from xpupool.server.job_views import Submitted

MAX_ANSWER = 64 << 20  # a submission's answer is a few kB; anything near this is a broken plane
CONNECT_TRIES_S = 10.0  # how long a request waits for a plane that is still starting
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Caller:
    """Who sent a request, as the worker saw it: the Authorization header's scheme and
    credentials (as FastAPI's ``HTTPBearer`` reads them; None without one) and the address."""

    scheme: str | None
    credentials: str | None
    client: str

    def meta(self) -> dict[str, Any]:
        return {"scheme": self.scheme, "credentials": self.credentials, "client": self.client}


@dataclass(frozen=True, slots=True)
class PlaneAnswer:
    """An answer as it goes to the client: status, extra headers, body."""

    status: int
    headers: dict[str, str]
    body: bytes


class PlaneUnreachable(Exception):  # noqa: N818 - an answer (503), not a bug
    """The plane did not take the request: it is starting, stopping or gone."""


def render_job(wire: bytes) -> bytes:
    """The 201 answer for a job the plane stored and sent as :data:`JOB`: the route's own view
    of it, rendered here rather than on the plane's core."""
    submitted = Submitted.from_wire(json.loads(wire))
    return submitted.view().model_dump_json(by_alias=True).encode()


class SubmitClient:
    """Connections to the plane's submission channel, one request at a time on each: a request
    takes an idle one or opens one, and gives it back when answered."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def submit(self, caller: Caller, job: bytes) -> PlaneAnswer:
        """The plane's answer to ``caller`` submitting ``job`` (a validated ``JobIn`` as JSON).
        Raises :class:`PlaneUnreachable` when no connection could be made, or the plane dropped
        it: the submission may or may not have been taken then, as with any request whose
        answer was lost."""
        return await self.ask({"op": SUBMIT, **caller.meta()}, job)

    async def refuse(self, caller: Caller, answer: PlaneAnswer, token_first: bool) -> PlaneAnswer:
        """The final answer to ``caller``'s submission that the worker refuses with ``answer``:
        the plane's own refusal of the token when ``token_first`` (or of the rate), else
        ``answer``; the plane audits it."""
        meta = {
            "op": REFUSE,
            **caller.meta(),
            "status": answer.status,
            "headers": answer.headers,
            "token_first": token_first,
        }
        return await self.ask(meta, answer.body)

    async def ask(self, meta: dict[str, Any], body: bytes) -> PlaneAnswer:
        reader, writer = await self._connection()
        try:
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
        return PlaneAnswer(
            int(head["status"]), {str(k): str(v) for k, v in headers.items()}, answer
        )

    async def _connection(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self.idle:
            return self.idle.pop()
        return await retry_connect(lambda: asyncio.open_unix_connection(str(self.path)))

    def close(self) -> None:
        for _, writer in self.idle:
            writer.close()
        self.idle.clear()


async def retry_connect(connect: Callable[[], Awaitable[T]]) -> T:
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
