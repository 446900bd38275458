"""The proxy process's end of the channel to the plane (``front/plane_side.py`` is the plane's):
frames out, answers back, one request at a time on each connection."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from xpupool.server.front.wire import FrameError, frame, read_frame

MAX_ANSWER = 64 << 20  # a snapshot is a few kB per service; anything near this is a broken plane
CONNECT_TRIES_S = 10.0  # how long a request waits for a plane that is still starting
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class PlaneAnswer:
    """An answer from the plane: status, extra headers, body."""

    status: int
    headers: dict[str, str]
    body: bytes


class PlaneUnreachable(Exception):  # noqa: N818 - an answer (503), not a bug
    """The plane did not take the request: it is starting, stopping or gone."""


class ChannelClient:
    """Connections to the plane's channel, one request at a time on each: a request takes an
    idle one or opens one, and gives it back when answered."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def ask(self, meta: dict[str, Any], body: bytes) -> PlaneAnswer:
        """The plane's answer to one frame. Raises :class:`PlaneUnreachable` when no connection
        could be made, or the plane dropped it."""
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
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            if asyncio.get_running_loop().time() > deadline:
                raise PlaneUnreachable(str(exc)) from None
            await asyncio.sleep(0.05)
