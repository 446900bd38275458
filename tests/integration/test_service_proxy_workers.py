"""A service's proxy behind the plane's HTTP workers (``xpupool up --http-workers``): a worker
passes every request but submissions to the plane's own HTTP server on a Unix socket
(``front/app.py``), and a websocket too (``front/ws_forward.py``). Here both run in this process
on real sockets (the worker's app on TCP, the plane's on its Unix socket), so the test can give
the plane its replicas (the Go stub, ``service_stubs.py``): a streamed answer must still arrive
event by event, a websocket must pass, and the replica must see the client's address, not the
worker's socket, and none of the caller's credentials."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import uvicorn
from server_proc import free_port, stop_process, until
from service_stubs import StaticEndpoints, Stub, start_stub
from websockets.sync.client import connect as ws_connect

from xpupool.server.app import create_app
from xpupool.server.front.app import FrontApp
from xpupool.server.up import UpConfig, open_plane

CLUSTER = Path(__file__).resolve().parents[2] / "examples" / "cluster-mixed.yaml"


def _serve(config: uvicorn.Config) -> tuple[uvicorn.Server, threading.Thread]:
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    until(lambda: server.started, "a server started")
    return server, thread


@pytest.fixture(scope="module")
def worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, Stub]]:
    """(the worker's URL, a tenant token of t1, the stub that is t1's service 'llm')."""
    root = tmp_path_factory.mktemp("workers")
    plane = open_plane(UpConfig(data=root / ".xpupool", cluster=CLUSTER, agent=False))
    stub = start_stub("w")
    endpoints = StaticEndpoints()
    endpoints.ready_by[("t1", "llm")] = [stub.endpoint(0)]
    plane.service_endpoints = endpoints
    sock = root / "plane.sock"
    plane_app = create_app(plane, background=False, forwarded=True)
    inner = _serve(uvicorn.Config(plane_app, uds=str(sock), log_level="warning"))
    front = FrontApp(sock, root / "channel.sock")
    port = free_port()
    outer = _serve(uvicorn.Config(front, host="127.0.0.1", port=port, log_level="warning"))
    url = f"http://127.0.0.1:{port}"
    admin = (root / ".xpupool" / "admin-token").read_text().strip()
    h = {"Authorization": f"Bearer {admin}"}
    httpx.post(f"{url}/v1/tenants", json={"name": "t1"}, headers=h).raise_for_status()
    r = httpx.post(f"{url}/v1/tenants/t1/tokens", json={"name": "t"}, headers=h)
    token = r.raise_for_status().json()["token"]
    try:
        yield url, token, stub
    finally:
        stop_process(stub.proc)
        for server, thread in (outer, inner):
            server.should_exit = True
            thread.join(10)


def test_a_streamed_answer_passes_the_worker_event_by_event(
    worker: tuple[str, str, Stub],
) -> None:
    url, token, stub = worker
    with (
        httpx.Client(timeout=httpx.Timeout(20)) as client,
        client.stream(
            "POST",
            f"{url}/v1/services/llm/proxy/v1/completions?hold=w1",
            json={"stream": True, "max_tokens": 3},
            headers={"Authorization": f"Bearer {token}"},
        ) as r,
    ):
        assert r.status_code == 200
        lines = r.iter_lines()
        first = next(line for line in lines if line)
        assert json.loads(first.removeprefix("data: "))["choices"][0]["text"] == "t0 "
        httpx.get(f"http://127.0.0.1:{stub.port}/release?hold=w1").raise_for_status()
        rest = [line for line in lines if line]
    assert rest[-1] == "data: [DONE]" and len(rest) == 3


def test_the_replica_sees_the_clients_address_and_no_credentials(
    worker: tuple[str, str, Stub],
) -> None:
    url, token, _ = worker
    r = httpx.get(
        f"{url}/v1/services/llm/proxy/headers",
        headers={"Authorization": f"Bearer {token}", "X-Xpupool-Client": "6.6.6.6"},
    )
    assert r.status_code == 200, r.text
    headers = {k.lower(): v for k, v in r.json()["headers"].items()}
    assert headers["x-forwarded-for"] == ["127.0.0.1"]
    assert "authorization" not in headers
    assert not [k for k in headers if k.startswith("x-xpupool")]
    assert token not in r.text


def test_a_websocket_passes_the_worker(worker: tuple[str, str, Stub]) -> None:
    url, token, _ = worker
    ws_url = url.replace("http://", "ws://") + "/v1/services/llm/proxy/ws"
    auth = {"Authorization": f"Bearer {token}"}
    with ws_connect(ws_url, additional_headers=auth, open_timeout=10) as ws:
        ws.send("through the worker")
        assert ws.recv(timeout=10) == "through the worker"
