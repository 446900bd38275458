"""Frames of the channel between the service proxy's own process and the plane (a Unix socket of
the plane's).

A frame is two parts, each with its length first: a JSON object (what to do, or how it went) and
bytes (a request's body, or an answer's). Either side refuses a frame larger than it expects
before reading it, so a broken peer cannot make the other hold any number of bytes.
"""

from __future__ import annotations

import asyncio
import json
import struct
from typing import Any

LENGTHS = struct.Struct(">II")  # the JSON part's length, then the body's
MAX_META = 64 << 10
SNAPSHOT = "snapshot"
"""The proxy process asks for the services' ready endpoints, sending its traffic counts
and the tokens it accepted lately (``front/proxy_plane.py``); the body is JSON both ways."""
CALLER = "caller"
"""The proxy process asks who a token (its SHA-256) is (``front/proxy_plane.py``)."""


class FrameError(Exception):
    """A frame that breaks the format: the connection is dropped, nothing else changes."""


def frame(meta: dict[str, Any], body: bytes = b"") -> bytes:
    head = json.dumps(meta, separators=(",", ":")).encode()
    return LENGTHS.pack(len(head), len(body)) + head + body


async def read_frame(reader: asyncio.StreamReader, max_body: int) -> tuple[dict[str, Any], bytes]:
    """The next frame; raises ``asyncio.IncompleteReadError`` at the end of the stream and
    :class:`FrameError` for a frame over the limits or whose JSON part is not an object."""
    n_meta, n_body = LENGTHS.unpack(await reader.readexactly(LENGTHS.size))
    if n_meta > MAX_META or n_body > max_body:
        raise FrameError(f"frame of {n_meta} + {n_body} bytes over the limits")
    head = await reader.readexactly(n_meta)
    body = await reader.readexactly(n_body) if n_body else b""
    try:
        meta = json.loads(head)
    except ValueError as exc:
        raise FrameError(f"frame header is not JSON: {exc}") from None
    if not isinstance(meta, dict):
        raise FrameError("frame header is not a JSON object")
    return meta, body


def render(body: object) -> bytes:
    """JSON as the app's ``JSONResponse`` writes it."""
    return json.dumps(body, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()
