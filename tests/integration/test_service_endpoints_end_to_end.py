"""A service through both of its endpoints, every part real: ``xpupool up`` with its in-process
agent runs the replicas on podman (the Go stub's image), the controller probes them, and callers
reach ``/v1/services/NAME/proxy/...`` on the API's port (the plane's own proxy) and on the proxy's
own process (``--proxy-port``), which proxies from the snapshot it polls from the plane
(``front/proxy_source.py``): requests, a streamed answer and a websocket pass both; a name with no
service is 404; a revoked service token and a deleted service stop within the poll's bound on the
proxy process; requests in flight there reach the controller, which scales on them, and their
answers the plane's /metrics; a stopped service ends its containers and is answered 503 on both
until it is started again."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from server_proc import ServerProc, free_port, until
from websockets.exceptions import ConnectionClosedError
from websockets.sync.client import connect as ws_connect

from container_images import ensure_stub_image, require_podman

CLUSTER = """\
nodes:
  - {name: box, cpu: 8, memory: 16Gi, runtime: podman}
"""


@pytest.fixture
def up(tmp_path: Path) -> Iterator[tuple[ServerProc, httpx.Client, str]]:
    """The server, a client of tenant ``team``, and the URL of the proxy's own process."""
    require_podman()
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    proxy_port = free_port()
    args = ("--heartbeat", "0.2", "--lost-after", "3")
    args += ("--proxy-port", str(proxy_port))
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("CONTAINERS_CONF", raising=False)  # the product's defaults, nothing of ours
        srv = ServerProc(
            tmp_path / "data", cluster=tmp_path / "cluster.yaml", agent=True, extra_args=args
        )
        with srv, srv.tenant_client("team") as user:
            yield srv, user, f"http://127.0.0.1:{proxy_port}"


def _service(user: httpx.Client, name: str) -> dict[str, Any]:
    r = user.get(f"/v1/services/{name}")
    assert r.status_code == 200, r.text
    return dict(r.json())


def _ws_echo(url: str, headers: dict[str, str], text: str) -> bool:
    """One websocket round trip; False on 1013 (try again later: the proxy process polled no
    ready replica yet), any other close fails the test."""
    try:
        with ws_connect(url, additional_headers=headers, open_timeout=10) as ws:
            ws.send(text)
            assert ws.recv(timeout=10) == text
    except ConnectionClosedError as exc:
        if exc.rcvd is not None and exc.rcvd.code == 1013:
            return False
        raise
    return True


def test_a_service_through_the_api_port_and_its_own_process(
    up: tuple[ServerProc, httpx.Client, str],
) -> None:
    srv, user, own = up
    body = {
        "name": "chat",
        "job": {"image": ensure_stub_image(), "spec": "cpu=100m"},
        "replicas": {"min": 1, "max": 2},
        "readiness": {"path": "/health", "interval_s": 0.5, "timeout_s": 0.5},
        "scaling": {"target_in_flight": 1, "window_s": 2, "drain_timeout_s": 30},
    }
    r = user.post("/v1/services", json=body)
    assert r.status_code == 201, r.text
    proxy = "/v1/services/chat/proxy"
    until(lambda: _service(user, "chat")["state"] == "ready", "service chat ready", 120)
    until(lambda: user.get(f"{proxy}/v1/models").status_code == 200, "chat through the API")
    assert user.get("/v1/services/none/proxy/v1/models").status_code == 404

    with user.stream(
        "POST", f"{proxy}/v1/completions", json={"model": "m", "prompt": "hi", "stream": True}
    ) as streamed:
        events = [line for line in streamed.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "data: [DONE]" and len(events) > 2, events

    ws_url = srv.url.replace("http://", "ws://") + f"{proxy}/ws"
    auth = {"Authorization": user.headers["Authorization"]}
    until(lambda: _ws_echo(ws_url, auth, "through the API"), "a websocket through the API")

    # the proxy's own process: the same service, the same answers
    with httpx.Client(base_url=own, headers=user.headers, timeout=30) as direct:
        until(lambda: direct.get(f"{proxy}/v1/models").status_code == 200, "chat, own process")
        assert direct.get("/v1/services/none/proxy/v1/models").status_code == 404
        body = {"model": "m", "prompt": "hi", "stream": True}
        with direct.stream("POST", f"{proxy}/v1/completions", json=body) as streamed:
            events = [line for line in streamed.iter_lines() if line.startswith("data: ")]
        assert events[-1] == "data: [DONE]" and len(events) > 2, events
    own_ws = own.replace("http://", "ws://") + f"{proxy}/ws"
    until(lambda: _ws_echo(own_ws, auth, "through its own"), "a websocket, own process")

    issued = user.post("/v1/services/chat/tokens", json={"name": "web"}).json()
    svc = {"Authorization": f"Bearer {issued['token']}"}
    until(
        lambda: httpx.get(f"{own}{proxy}/v1/models", headers=svc).status_code == 200,
        "the service token taken by the proxy process",
    )
    assert user.delete(f"/v1/services/chat/tokens/{issued['id']}").status_code == 204
    until(
        lambda: httpx.get(f"{own}{proxy}/v1/models", headers=svc).status_code == 401,
        "the revoked token refused by the proxy process",
    )

    # three slow requests in flight in the proxy process, target 1 per replica: a second replica
    results: list[int] = []

    def slow() -> None:
        with httpx.Client(base_url=own, headers=user.headers, timeout=60) as c:
            results.append(c.get(f"{proxy}/slow", params={"ms": "6000"}).status_code)

    callers = [threading.Thread(target=slow) for _ in range(3)]
    for t in callers:
        t.start()
    until(lambda: _service(user, "chat")["desired"] == 2, "a second replica for the load", 30)
    for t in callers:
        t.join(60)
    assert results == [200, 200, 200]

    def answered() -> float:
        """The plane's count of chat's 200s, the proxy process's included."""
        text = httpx.get(f"{srv.url}/metrics", headers=srv.headers(), timeout=10).text
        line = 'xpupool_service_requests_total{code="200",service="chat",tenant="team"} '
        found = [x for x in text.splitlines() if x.startswith(line)]
        return float(found[0][len(line) :]) if found else 0.0

    until(lambda: answered() >= 5, "the proxy process's answers in the plane's /metrics")
    assert _service(user, "chat")["requests_per_s"] > 0

    # stopped: the replicas end, both answer 503 naming the state; started: ready again
    jobs = [r["job_id"] for r in _service(user, "chat")["replicas"]]
    r = user.post("/v1/services/chat/stop")
    assert r.status_code == 200 and r.json()["state"] == "stopped", r.text

    def ended() -> bool:
        return all(user.get(f"/v1/jobs/{j}").json()["state"] == "cancelled" for j in jobs)

    until(ended, "the stopped service's replicas ended", 60)

    def refused(base: str) -> bool:
        r = httpx.get(f"{base}{proxy}/v1/models", headers=user.headers)
        return r.status_code == 503 and "is stopped" in r.json()["detail"]

    until(lambda: refused(srv.url), "the API's port answering that chat is stopped")
    until(lambda: refused(own), "the proxy process answering that chat is stopped")
    assert _service(user, "chat")["state"] == "stopped"
    assert user.post("/v1/services/chat/start").status_code == 200
    until(lambda: _service(user, "chat")["state"] == "ready", "chat ready after its start", 120)
    until(lambda: user.get(f"{proxy}/v1/models").status_code == 200, "chat through the API again")

    assert user.delete("/v1/services/chat").status_code in (200, 202, 204)
    until(
        lambda: httpx.get(f"{own}{proxy}/v1/models", headers=user.headers).status_code == 404,
        "the deleted service gone from the proxy process's snapshot",
        60,
    )

    def series() -> list[str]:
        text = httpx.get(f"{srv.url}/metrics", headers=srv.headers(), timeout=10).text
        return [x for x in text.splitlines() if 'service="chat"' in x]

    until(lambda: not series(), "the deleted service's series gone from /metrics", 60)
