"""The plane's end of the channel from the service proxy's own process (``up --proxy-port``,
``front/proxy_main.py``): its polls for the services' ready endpoints and its token checks
(``wire.SNAPSHOT``, ``wire.CALLER``), answered by ``front/proxy_plane.py`` on the plane's event
loop.

The channel is a Unix socket in a directory of mode 0700 (the plane's user only). A connection
carries one request at a time, answered in order.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from xpupool.server.front.proxy_plane import ProxyAnswers
from xpupool.server.front.wire import CALLER, SNAPSHOT, FrameError, frame, read_frame
from xpupool.server.plane import ControlPlane

log = logging.getLogger("xpupool.server")


class ProxyChannel:
    """The plane's listener on ``path`` for the proxy process; ``proxy`` (set by ``create_app``)
    answers its frames."""

    def __init__(self, plane: ControlPlane, path: Path, max_body: int) -> None:
        self.plane = plane
        self.path = path
        self.max_body = max_body
        self.proxy: ProxyAnswers | None = None
        self.server: asyncio.AbstractServer | None = None

    async def start(self) -> None:
        self.path.unlink(missing_ok=True)  # left by a server that was killed: DirLock is ours
        self.server = await asyncio.start_unix_server(self._serve, path=str(self.path))

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()
        self.path.unlink(missing_ok=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                meta, body = await read_frame(reader, self.max_body)
                op = meta.get("op")
                if op not in (SNAPSHOT, CALLER) or self.proxy is None:
                    raise FrameError(f"unknown operation {op!r}")
                answered = await self.proxy.answer(str(op), body)
                writer.write(frame({"status": 200, "headers": {}}, answered))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the proxy process went away
        except FrameError as exc:
            log.warning("service proxy channel: %s; connection dropped", exc)
        finally:
            writer.close()
