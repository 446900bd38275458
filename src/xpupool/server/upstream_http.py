"""The service proxy's HTTP/1.1 client to replicas: pooled keep-alive connections per address,
one write per request with a known body, the answer's body read as it comes.

Why not httpx: through anyio, every request asks its connection's
extra attributes (two ``getpeername`` calls), polls the socket, and fails to import ``sniffio``
four times; on a machine where a system call is slow that was most of the proxy's added latency
(docs/benchmarks.md). Here a request is a few writes and reads on an asyncio stream, framed by
``h11`` (which httpx and uvicorn carry already).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import suppress

import h11

READ_BYTES = 65536
MAX_IDLE_PER_ADDRESS = 64


class UpstreamError(Exception):
    """No answer started: the connection was refused, reset or closed first (the request may
    be tried elsewhere if its body can be sent again)."""


class UpstreamConnection:
    """A keep-alive connection to one replica (its h11 state for the ASGI proxy's requests)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.h11 = h11.Connection(h11.CLIENT)

    def usable(self) -> bool:
        return not self.reader.at_eof() and not self.writer.is_closing()

    def close(self) -> None:
        with suppress(Exception):
            self.writer.close()


class UpstreamResponse:
    """An answer whose status and headers are read; its body is read by :meth:`chunks`."""

    def __init__(
        self,
        pool: UpstreamPool,
        address: tuple[str, int],
        conn: UpstreamConnection,
        response: h11.Response,
    ) -> None:
        self.pool = pool
        self.address = address
        self.conn = conn
        self.status = response.status_code
        self.headers: Sequence[tuple[bytes, bytes]] = list(response.headers)  # names lower-case
        self._done = False

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body's bytes as they come (decoded from chunked framing)."""
        while True:
            event = await _next_event(self.conn)
            if isinstance(event, h11.Data):
                yield bytes(event.data)
            elif isinstance(event, h11.EndOfMessage):
                self._done = True
                return
            elif isinstance(event, h11.ConnectionClosed):
                raise ConnectionResetError("the replica closed the connection mid-answer")

    def close(self) -> None:
        """Hand the connection back when the answer was read whole, else close it."""
        conn = self.conn
        if (
            self._done
            and conn.h11.our_state is h11.DONE
            and conn.h11.their_state is h11.DONE
            and conn.usable()
        ):
            conn.h11.start_next_cycle()
            self.pool.give_back(self.address, conn)
        else:
            conn.close()


async def _next_event(conn: UpstreamConnection) -> object:
    while True:
        event = conn.h11.next_event()
        if event is not h11.NEED_DATA:
            return event
        data = await conn.reader.read(READ_BYTES)
        if not data and conn.h11.their_state is h11.SEND_RESPONSE:
            raise ConnectionResetError("the replica closed the connection before answering")
        conn.h11.receive_data(data)  # b"": the peer closed (the end of a body read to the close)


class UpstreamPool:
    """Idle keep-alive connections per (host, port)."""

    def __init__(self, connect_timeout_s: float) -> None:
        self.connect_timeout_s = connect_timeout_s
        self._idle: dict[tuple[str, int], list[UpstreamConnection]] = {}

    def give_back(self, address: tuple[str, int], conn: UpstreamConnection) -> None:
        idle = self._idle.setdefault(address, [])
        if len(idle) < MAX_IDLE_PER_ADDRESS:
            idle.append(conn)
        else:
            conn.close()

    def close(self) -> None:
        for idle in self._idle.values():
            for conn in idle:
                conn.close()
        self._idle.clear()

    async def connection(self, address: tuple[str, int]) -> tuple[UpstreamConnection, bool]:
        """A connection to ``address``: an idle one (True) or a new one (False)."""
        idle = self._idle.get(address)
        while idle:
            conn = idle.pop()
            if conn.usable():
                return conn, True
            conn.close()
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(*address, limit=READ_BYTES * 4),
                self.connect_timeout_s,
            )
        except (OSError, TimeoutError) as exc:
            raise UpstreamError(f"{type(exc).__name__}: {exc}") from None
        return UpstreamConnection(reader, writer), False

    async def request(
        self,
        address: tuple[str, int],
        method: str,
        target: bytes,
        headers: list[tuple[bytes, bytes]],
        body: bytes | AsyncIterator[bytes],
    ) -> UpstreamResponse:
        """Send the request and read the answer's status and headers. :class:`UpstreamError`
        when no answer started; a reused connection the replica had closed meanwhile is
        replaced once, when the body can be sent again."""
        while True:
            conn, reused = await self.connection(address)
            try:
                return await self._exchange(address, conn, method, target, headers, body)
            except UpstreamError:
                conn.close()
                if not (reused and isinstance(body, bytes)):
                    raise

    async def _exchange(
        self,
        address: tuple[str, int],
        conn: UpstreamConnection,
        method: str,
        target: bytes,
        headers: list[tuple[bytes, bytes]],
        body: bytes | AsyncIterator[bytes],
    ) -> UpstreamResponse:
        host = f"{address[0]}:{address[1]}".encode()
        framing: list[tuple[bytes, bytes]] = []
        if any(k == b"content-length" for k, _ in headers):
            pass  # the caller's length frames the body, read whole or streamed (h11 checks it)
        elif not isinstance(body, bytes):
            framing = [(b"transfer-encoding", b"chunked")]
        elif body or method not in ("GET", "HEAD"):
            framing = [(b"content-length", str(len(body)).encode())]
        try:
            head = h11.Request(
                method=method, target=target, headers=[(b"host", host), *headers, *framing]
            )
            out = conn.h11.send(head) or b""
            if isinstance(body, bytes):
                if body:
                    out += conn.h11.send(h11.Data(data=body)) or b""
                conn.writer.write(out + (conn.h11.send(h11.EndOfMessage()) or b""))
            else:
                conn.writer.write(out)
                async for chunk in body:
                    conn.writer.write(conn.h11.send(h11.Data(data=chunk)) or b"")
                    await conn.writer.drain()
                conn.writer.write(conn.h11.send(h11.EndOfMessage()) or b"")
            await conn.writer.drain()
            while True:
                event = await _next_event(conn)
                if isinstance(event, h11.Response):
                    return UpstreamResponse(self, address, conn, event)
                if isinstance(event, h11.ConnectionClosed):
                    raise UpstreamError("the replica closed the connection before answering")
                # an InformationalResponse (100 Continue): read on
        except (OSError, h11.ProtocolError) as exc:  # ours too: a body short of its length
            raise UpstreamError(f"{type(exc).__name__}: {exc}") from None
