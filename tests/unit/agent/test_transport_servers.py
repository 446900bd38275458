"""An agent given a plane and its standbys (``--server A,B``; issue 50): each call goes to the
server that answered last, a refused connection or a 503 (a standby's answer to everything) is
tried on the next, and the agent follows a take-over without a restart. Real HTTP servers on
127.0.0.1 stand for the planes; a closed port for one that is down."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import click
import pytest

from xpupool.agent.command import _servers
from xpupool.agent.transport import HttpTransport, TransportError
from xpupool.server.schemas.agent_protocol import Heartbeat

REPLY = json.dumps({"run": [], "stop": [], "heartbeat_s": 5.0}).encode()


class Plane:
    """A server that answers every POST with ``status`` (200: a heartbeat's reply; 503: what a
    standby says) and counts the calls it got."""

    def __init__(self, status: int) -> None:
        self.status = status
        self.calls = 0
        plane = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                plane.calls += 1
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                body = REPLY if plane.status == 200 else b'{"reason": "standby"}'
                self.send_response(plane.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def planes() -> Iterator[tuple[Plane, Plane]]:
    a, b = Plane(503), Plane(200)
    yield a, b
    a.close()
    b.close()


def down_url() -> str:
    """A URL nobody listens on: a port taken from the kernel, then closed."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def beat(transport: HttpTransport) -> float:
    return transport.heartbeat(Heartbeat(node="n1")).heartbeat_s


def test_a_call_goes_past_a_down_server_and_a_standby_and_stays_where_it_was_answered(
    planes: tuple[Plane, Plane],
) -> None:
    standby, active = planes
    transport = HttpTransport([down_url(), standby.url, active.url], "t")
    assert beat(transport) == 5.0
    assert (standby.calls, active.calls) == (1, 1) and transport.server == active.url
    assert beat(transport) == 5.0  # straight to the one that answered
    assert (standby.calls, active.calls) == (1, 2)
    # a take-over: the active one now answers 503 and the standby serves
    active.status, standby.status = 503, 200
    assert beat(transport) == 5.0 and transport.server == standby.url
    assert (standby.calls, active.calls) == (2, 3)
    transport.close()


def test_when_no_server_answers_the_error_names_each(planes: tuple[Plane, Plane]) -> None:
    standby, _ = planes
    down = down_url()
    transport = HttpTransport([down, standby.url], "t")
    with pytest.raises(TransportError) as err:
        beat(transport)
    text = str(err.value)
    assert "no server answered" in text and "503 standby" in text and "onnect" in text, text
    transport.close()


def test_one_server_answering_503_fails_the_call_as_before(planes: tuple[Plane, Plane]) -> None:
    standby, _ = planes
    transport = HttpTransport(standby.url, "t")
    with pytest.raises(TransportError, match=r"POST /v1/agent/heartbeat: 503"):
        beat(transport)
    assert standby.calls == 1
    transport.close()


def test_the_server_option_takes_a_list_and_names_a_bad_url() -> None:
    assert _servers("http://a:8080, https://b:8443") == ["http://a:8080", "https://b:8443"]
    for bad in ("a:8080", "http://", "http://a,ftp://b", ""):
        with pytest.raises(click.BadParameter, match=r"--server|expected an http"):
            _servers(bad)
