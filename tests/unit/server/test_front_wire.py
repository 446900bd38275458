"""The frames between the HTTP workers and the plane (``server/front/wire.py``): what one side
writes the other reads back, and a frame over the limits or not in the format is refused before
its body is read."""

from __future__ import annotations

import asyncio

import pytest
from server_kit import run_loop

from xpupool.server.front.wire import LENGTHS, MAX_META, FrameError, frame, read_frame


def _read(data: bytes, max_body: int = 1 << 20) -> tuple[dict[str, object], bytes]:
    async def go() -> tuple[dict[str, object], bytes]:
        reader = asyncio.StreamReader()
        reader.feed_data(data)
        reader.feed_eof()
        return await read_frame(reader, max_body)

    return run_loop(go())  # not asyncio.run: the browser tests keep a loop in this thread


def test_a_frame_reads_back_as_written() -> None:
    meta = {"op": "submit", "authorization": "Bearer x", "content_type": None}
    assert _read(frame(meta, b'{"a": 1}')) == (meta, b'{"a": 1}')
    assert _read(frame({"status": 201})) == ({"status": 201}, b"")


def test_a_body_over_the_limit_is_refused_before_it_is_read() -> None:
    head = LENGTHS.pack(2, 1 << 30) + b"{}"  # says a GiB follows; none does
    with pytest.raises(FrameError, match="over the limits"):
        _read(head, max_body=1 << 20)


def test_a_header_over_the_limit_is_refused() -> None:
    with pytest.raises(FrameError, match="over the limits"):
        _read(LENGTHS.pack(MAX_META + 1, 0))


@pytest.mark.parametrize("head", [b"[1]", b"nope", b'"text"'])
def test_a_header_that_is_not_a_json_object_is_refused(head: bytes) -> None:
    with pytest.raises(FrameError):
        _read(LENGTHS.pack(len(head), 0) + head)


def test_a_frame_cut_short_is_the_end_of_the_stream() -> None:
    whole = frame({"op": "submit"}, b"body")
    with pytest.raises(asyncio.IncompleteReadError):
        _read(whole[:-2])
