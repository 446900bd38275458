"""One websocket passed through: the caller's (an ASGI websocket) and the upstream one (a
``websockets`` client connection), message by message both ways until either side closes. Used
by a service's proxy (``service_proxy_ws.py``), in the plane or in the proxy process."""

from __future__ import annotations

import asyncio
from contextlib import suppress

from starlette.types import Receive, Send
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed


async def accept_and_pump(upstream: ClientConnection, receive: Receive, send: Send) -> None:
    """Accept the caller's websocket (with the subprotocol upstream chose), then pass messages
    until one side closes; the other is closed with the same code."""
    accept: dict[str, object] = {"type": "websocket.accept"}
    if upstream.subprotocol is not None:
        accept["subprotocol"] = upstream.subprotocol
    await send(accept)

    async def down() -> None:  # upstream -> caller
        with suppress(ConnectionClosed):
            async for message in upstream:
                key = "text" if isinstance(message, str) else "bytes"
                await send({"type": "websocket.send", key: message})
        code = upstream.close_code or 1000
        with suppress(Exception):  # the caller may be gone already
            await send(
                {"type": "websocket.close", "code": code, "reason": upstream.close_reason or ""}
            )

    async def up() -> None:  # caller -> upstream
        while True:
            message = await receive()
            if message["type"] == "websocket.disconnect":
                await upstream.close(int(message.get("code", 1000)))
                return
            if message.get("text") is not None:
                await upstream.send(message["text"])
            elif message.get("bytes") is not None:
                await upstream.send(message["bytes"])

    tasks = [asyncio.ensure_future(down()), asyncio.ensure_future(up())]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with suppress(asyncio.CancelledError, ConnectionClosed):
                await task
        await upstream.close()
