"""A service's stable endpoint (``/v1/services/NAME/proxy/...``) against real replicas: the Go
stub server (``tests/fixtures/services/stub``, built by ``container_images.stub_binary``) as host
processes on free ports, a real server (uvicorn in a thread, a real SQLite file) and real clients.

The replicas are given to the plane by a static :class:`Endpoints` of the test's own (the service
controller, which finds them for real, is another part of issue 47): the proxy reads nothing else.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import uvicorn
from click.testing import CliRunner
from server_proc import free_port, stop_process, until
from service_stubs import StaticEndpoints, Stub, start_stub
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect as ws_connect

from xpupool.cli import main
from xpupool.server.app import create_app
from xpupool.server.plane import ControlPlane
from xpupool.server.rate_limit import Rate, RateLimiter
from xpupool.server.schemas.tenants import TenantIn, TokenIn
from xpupool.server.service_endpoints import Endpoint
from xpupool.server.services import tenants
from xpupool.server.up import UpConfig, admin_token_path, open_plane

CLUSTER = Path(__file__).resolve().parents[2] / "examples" / "cluster-mixed.yaml"


@dataclass
class Pool:
    url: str
    admin: str
    plane: ControlPlane
    endpoints: StaticEndpoints
    stubs: list[Stub]
    tokens: dict[str, str]

    def proxy(self, service: str, path: str) -> str:
        return f"{self.url}/v1/services/{service}/proxy{path}"

    def auth(self, tenant: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[tenant]}"}


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pool]:
    root = tmp_path_factory.mktemp("proxy")
    data = root / ".xpupool"
    plane = open_plane(UpConfig(data=data, cluster=CLUSTER, agent=False))
    endpoints = StaticEndpoints()
    plane.service_endpoints = endpoints
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(plane), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    until(lambda: server.started, "the server started")
    url = f"http://127.0.0.1:{port}"
    admin = admin_token_path(data).read_text().strip()
    tokens = {}
    for tenant in ("t1", "t2"):
        h = {"Authorization": f"Bearer {admin}"}
        httpx.post(f"{url}/v1/tenants", json={"name": tenant}, headers=h).raise_for_status()
        r = httpx.post(f"{url}/v1/tenants/{tenant}/tokens", json={"name": "t"}, headers=h)
        tokens[tenant] = r.raise_for_status().json()["token"]
    stubs = [start_stub("a"), start_stub("b")]
    try:
        yield Pool(url, admin, plane, endpoints, stubs, tokens)
    finally:
        for stub in stubs:
            stop_process(stub.proc)
        server.should_exit = True
        thread.join(10)


def _dead_endpoint(replica: int) -> Endpoint:
    """An address where nothing listens: a connection there is refused."""
    return Endpoint(job_id=9, replica=replica, host="127.0.0.1", port=free_port())


def test_requests_go_round_robin_over_the_ready_replicas(pool: Pool) -> None:
    pool.endpoints.ready_by[("t1", "rr")] = [s.endpoint(i) for i, s in enumerate(pool.stubs)]
    seen = [
        httpx.get(pool.proxy("rr", "/v1/models"), headers=pool.auth("t1")).headers["x-stub"]
        for _ in range(4)
    ]
    assert sorted(seen) == ["a", "a", "b", "b"]
    assert seen[0] != seen[1] and seen[1] != seen[2]


def test_a_refused_replica_is_skipped_and_all_refused_is_502(pool: Pool) -> None:
    dead = _dead_endpoint(0)
    pool.endpoints.ready_by[("t1", "half")] = [dead, pool.stubs[0].endpoint(1)]
    for _ in range(3):  # whichever the turn starts at, the live replica answers
        r = httpx.post(pool.proxy("half", "/headers"), headers=pool.auth("t1"), content=b'{"x": 1}')
        assert r.status_code == 200 and r.json()["body"] == '{"x": 1}'
    pool.endpoints.ready_by[("t1", "gone")] = [_dead_endpoint(0), _dead_endpoint(1)]
    r = httpx.get(pool.proxy("gone", "/v1/models"), headers=pool.auth("t1"))
    assert r.status_code == 502
    assert "no replica answered" in r.json()["detail"]
    assert "Connection refused" in r.json()["detail"]


def _stored(pool: Pool, tenant: str, name: str) -> None:
    """A service of ``tenant`` in the store (no controller runs here: it gets no replica)."""
    body = {"name": name, "job": {"command": ["true"]}}
    r = httpx.post(f"{pool.url}/v1/services", json=body, headers=pool.auth(tenant))
    assert r.status_code == 201, r.text


def test_no_ready_replica_is_503_with_retry_after(pool: Pool) -> None:
    _stored(pool, "t1", "starting")
    r = httpx.get(pool.proxy("starting", "/v1/models"), headers=pool.auth("t1"))
    assert r.status_code == 503
    assert r.json()["detail"] == "service starting has no ready replica"
    assert int(r.headers["retry-after"]) > 0


def test_a_name_the_tenant_has_no_service_of_is_404_not_503(pool: Pool) -> None:
    """It was 503 "no ready replica" with Retry-After, which clients that retry 503s (OpenAI's
    do) would retry for ever on a typo."""
    r = httpx.get(pool.proxy("no-such-service", "/v1/models"), headers=pool.auth("t1"))
    assert r.status_code == 404, r.text
    assert r.json()["detail"] == "service no-such-service not found"
    assert "retry-after" not in r.headers


def test_the_backend_never_sees_the_callers_credentials(pool: Pool) -> None:
    pool.endpoints.ready_by[("t1", "hdr")] = [pool.stubs[0].endpoint(0)]
    r = httpx.get(
        pool.proxy("hdr", "/headers?a=1&b=%2F"),
        headers={
            **pool.auth("t1"),
            "Cookie": "xpupool_session=secret; theirs=1",
            "X-Xpupool-Anything": "secret",
            "X-Upstream-Authorization": "Bearer sk-backend",
            "Connection": "keep-alive, X-Hop",
            "X-Hop": "dropped",
            "X-Kept": "kept",
        },
    )
    assert r.status_code == 200, r.text
    assert len(r.headers.get_list("date")) == 1  # the replica's is hop-by-hop: the server's only
    got = r.json()
    headers = {k.lower(): v for k, v in got["headers"].items()}
    assert headers["authorization"] == ["Bearer sk-backend"]
    assert headers["cookie"] == ["theirs=1"]
    assert "x-xpupool-anything" not in headers and "x-hop" not in headers
    assert "x-upstream-authorization" not in headers
    assert headers["x-kept"] == ["kept"]
    assert headers["x-forwarded-for"] == ["127.0.0.1"]
    assert headers["x-forwarded-proto"] == ["http"]
    assert got["path"] == "/headers" and got["query"] == "a=1&b=%2F"
    assert pool.tokens["t1"] not in json.dumps(got)


def test_a_streamed_completion_arrives_event_by_event(pool: Pool) -> None:
    """The stub holds every event after the first until released: the first event reaches the
    client through the proxy while the stub has not yet sent the last (a buffering proxy would
    hold it, and the read would time out)."""
    stub = pool.stubs[0]
    pool.endpoints.ready_by[("t1", "llm")] = [stub.endpoint(0)]
    body = {"model": "stub", "stream": True, "max_tokens": 3, "messages": []}
    with (
        httpx.Client(timeout=httpx.Timeout(20)) as client,
        client.stream(
            "POST",
            pool.proxy("llm", "/v1/chat/completions?hold=sse1"),
            json=body,
            headers=pool.auth("t1"),
        ) as r,
    ):
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        lines = r.iter_lines()
        first = next(line for line in lines if line)
        assert json.loads(first.removeprefix("data: "))["choices"][0]["delta"]["content"] == "t0 "
        httpx.get(f"http://127.0.0.1:{stub.port}/release?hold=sse1").raise_for_status()
        rest = [line for line in lines if line]
    assert rest[-1] == "data: [DONE]" and len(rest) == 3


def test_a_client_that_goes_away_mid_stream_is_no_longer_in_flight(pool: Pool) -> None:
    stub = pool.stubs[1]
    endpoint = stub.endpoint(0)
    pool.endpoints.ready_by[("t1", "leave")] = [endpoint]
    traffic = pool.plane.service_traffic
    with (
        httpx.Client(timeout=httpx.Timeout(20)) as client,
        client.stream(
            "POST",
            pool.proxy("leave", "/v1/completions?hold=never"),
            json={"stream": True, "max_tokens": 3},
            headers=pool.auth("t1"),
        ) as r,
    ):
        lines = r.iter_lines()  # held: an iterator dropped closes the response (httpx)
        next(line for line in lines if line)
        assert traffic.in_flight("t1", "leave") == 1
        assert traffic.in_flight_at(endpoint) == 1
    until(lambda: traffic.in_flight("t1", "leave") == 0, "the request counted out")
    assert traffic.in_flight_at(endpoint) == 0


def test_tokens_of_no_one_of_another_role_or_of_another_tenant(pool: Pool) -> None:
    pool.endpoints.ready_by[("t1", "mine")] = [pool.stubs[0].endpoint(0)]
    assert httpx.get(pool.proxy("mine", "/v1/models")).status_code == 401
    bad = {"Authorization": "Bearer xpp_nope"}
    assert httpx.get(pool.proxy("mine", "/v1/models"), headers=bad).status_code == 401
    admin = {"Authorization": f"Bearer {pool.admin}"}
    assert httpx.get(pool.proxy("mine", "/v1/models"), headers=admin).status_code == 403
    # another tenant is answered as for any name it has no service of: nothing says t1 has one
    _stored(pool, "t1", "mine")
    r = httpx.get(pool.proxy("mine", "/v1/models"), headers=pool.auth("t2"))
    r_none = httpx.get(pool.proxy("nothing-here", "/v1/models"), headers=pool.auth("t2"))
    assert r.status_code == r_none.status_code == 404
    assert r.json()["detail"].replace("mine", "X") == r_none.json()["detail"].replace(
        "nothing-here", "X"
    )


def test_service_tokens_issue_list_use_and_revoke(pool: Pool) -> None:
    pool.endpoints.ready_by[("t1", "api")] = [pool.stubs[0].endpoint(0)]
    pool.endpoints.ready_by[("t1", "other")] = [pool.stubs[1].endpoint(0)]
    base = f"{pool.url}/v1/services/api/tokens"
    r = httpx.post(base, json={"name": "web"}, headers=pool.auth("t1"))
    assert r.status_code == 201, r.text
    issued = r.json()
    secret = issued["token"]
    assert secret.startswith("xps_") and issued["service"] == "api"
    listed = httpx.get(base, headers=pool.auth("t1")).json()
    assert [t["id"] for t in listed] == [issued["id"]]
    assert all(t.get("token") is None for t in listed) and secret not in json.dumps(listed)
    svc = {"Authorization": f"Bearer {secret}"}
    r = httpx.get(pool.proxy("api", "/headers"), headers=svc)
    assert r.status_code == 200 and secret not in r.text
    assert httpx.get(pool.proxy("other", "/v1/models"), headers=svc).status_code == 404
    # t2 cannot see, list or revoke t1's tokens; a refused revoke changes nothing
    assert httpx.get(base, headers=pool.auth("t2")).json() == []
    gone = httpx.delete(f"{base}/{issued['id']}", headers=pool.auth("t2"))
    assert gone.status_code == 404
    assert httpx.get(pool.proxy("api", "/v1/models"), headers=svc).status_code == 200
    assert httpx.delete(f"{base}/{issued['id']}", headers=pool.auth("t1")).status_code == 204
    assert httpx.get(pool.proxy("api", "/v1/models"), headers=svc).status_code == 401
    assert httpx.get(base, headers=pool.auth("t1")).json()[0]["revoked"] is True
    admin = {"Authorization": f"Bearer {pool.admin}"}
    rows = httpx.get(f"{pool.url}/v1/audit", headers=admin, params={"limit": 50}).json()
    actions = [(e["action"], e["tenant"], e["target"]) for e in _entries(rows)]
    target = f"service token {issued['id']} of service api of tenant t1"
    assert ("issue_service_token", "t1", target) in actions
    assert ("revoke_service_token", "t1", target) in actions


def _entries(rows: object) -> list[dict[str, object]]:
    if isinstance(rows, dict):
        found = rows.get("entries") or rows.get("items") or []
        assert isinstance(found, list)
        return found
    assert isinstance(rows, list)
    return rows


def test_service_token_input_is_validated(pool: Pool) -> None:
    base = f"{pool.url}/v1/services/api/tokens"
    r = httpx.post(base, json={"name": "Not A Name"}, headers=pool.auth("t1"))
    assert r.status_code == 422 and r.json()["field"] == "name"
    r = httpx.post(base, json={"extra": 1}, headers=pool.auth("t1"))
    assert r.status_code == 422
    r = httpx.post(f"{pool.url}/v1/services/BAD/tokens", json={}, headers=pool.auth("t1"))
    assert r.status_code == 422


def test_a_websocket_is_passed_through(pool: Pool) -> None:
    pool.endpoints.ready_by[("t1", "ws")] = [_dead_endpoint(0), pool.stubs[0].endpoint(1)]
    url = pool.proxy("ws", "/ws").replace("http://", "ws://")
    for _ in range(2):  # whichever replica the turn starts at
        with ws_connect(url, additional_headers=pool.auth("t1"), open_timeout=10) as ws:
            ws.send("hello")
            assert ws.recv(timeout=10) == "hello"
            ws.send(b"\x00\x01")
            assert ws.recv(timeout=10) == b"\x00\x01"
    with pytest.raises(InvalidStatus), ws_connect(url, open_timeout=10):
        pass


def test_traffic_rate_and_metrics(pool: Pool) -> None:
    pool.endpoints.ready_by[("t1", "count")] = [pool.stubs[0].endpoint(0)]
    for _ in range(5):
        r = httpx.get(pool.proxy("count", "/slow?ms=1"), headers=pool.auth("t1"))
        assert r.status_code == 200
    traffic = pool.plane.service_traffic  # counted out just after the answer's last byte
    until(lambda: traffic.in_flight("t1", "count") == 0, "the requests counted out")
    rate, p99 = traffic.rate("t1", "count")
    assert rate > 0 and p99 is not None and p99 > 0
    admin = {"Authorization": f"Bearer {pool.admin}"}
    text = httpx.get(f"{pool.url}/metrics", headers=admin).text
    assert 'xpupool_service_requests_total{code="200",service="count",tenant="t1"} 5.0' in text
    assert 'xpupool_service_request_seconds_count{service="count",tenant="t1"} 5.0' in text
    assert 'xpupool_service_in_flight{service="count",tenant="t1"} 0.0' in text


def test_a_large_streamed_request_body_reaches_the_replica(pool: Pool) -> None:
    pool.endpoints.ready_by[("t1", "big")] = [pool.stubs[1].endpoint(0)]

    def chunks() -> Iterator[bytes]:  # no length: sent chunked, streamed through
        for i in range(64):
            yield bytes([97 + i % 26]) * 1024
            time.sleep(0)

    r = httpx.post(pool.proxy("big", "/headers"), headers=pool.auth("t1"), content=chunks())
    assert r.status_code == 200
    assert len(r.json()["body"]) == 64 * 1024


def test_the_cli_creates_lists_and_revokes_service_tokens(pool: Pool, tmp_path: Path) -> None:
    pool.endpoints.ready_by[("t1", "cli")] = [pool.stubs[0].endpoint(0)]
    env = {
        "XPUPOOL_URL": pool.url,
        "XPUPOOL_TOKEN": pool.tokens["t1"],
        "HOME": str(tmp_path),
        "XPUPOOL_CONFIG": None,
        "COLUMNS": "200",
    }

    def cli(*args: str) -> str:
        done = CliRunner().invoke(main, ["service", "token", *args], env=env)  # type: ignore[arg-type]
        assert done.exit_code == 0, done.output
        return done.stdout

    issued = json.loads(cli("create", "cli", "--name", "nb", "-o", "json"))
    secret = issued["token"]
    svc = {"Authorization": f"Bearer {secret}"}
    assert httpx.get(pool.proxy("cli", "/v1/models"), headers=svc).status_code == 200
    listed = cli("list", "cli")
    assert "nb" in listed and secret not in listed
    assert "revoked" in cli("revoke", "cli", str(issued["id"]))
    assert httpx.get(pool.proxy("cli", "/v1/models"), headers=svc).status_code == 401


def test_a_services_traffic_is_not_held_to_the_apis_rate_limits(tmp_path: Path) -> None:
    """The API's limits are per credential (a few requests a second for a token, fewer for an
    address with none valid): a service's callers are the service's load, not the API's. A
    service token is not an API credential: it was counted as none, at the address's rate."""
    plane = open_plane(UpConfig(data=tmp_path / ".xpupool", cluster=CLUSTER, agent=False))
    stub = start_stub("limited")
    endpoints = StaticEndpoints()
    endpoints.ready_by[("t1", "busy")] = [stub.endpoint(0)]
    plane.service_endpoints = endpoints
    limiter = RateLimiter(plane, Rate(1.0, 3), Rate(1.0, 3))
    app = create_app(plane, background=False, limiter=limiter)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        until(lambda: server.started, "the server started")
        url = f"http://127.0.0.1:{port}"
        tenant = tenants.create_tenant(plane, TenantIn(name="t1"))
        token = tenants.issue_token(plane, tenant.name, TokenIn(name="t")).token
        assert token is not None
        issued = httpx.post(
            f"{url}/v1/services/busy/tokens", json={}, headers={"Authorization": f"Bearer {token}"}
        )
        for secret in (token, issued.raise_for_status().json()["token"]):
            codes = {
                httpx.get(
                    f"{url}/v1/services/busy/proxy/v1/models",
                    headers={"Authorization": f"Bearer {secret}"},
                ).status_code
                for _ in range(12)
            }
            assert codes == {200}
    finally:
        stop_process(stub.proc)
        server.should_exit = True
        thread.join(10)


def test_a_replica_that_closes_before_answering_is_skipped(pool: Pool) -> None:
    """Accepted, then closed without a byte of answer (a replica dying): the next one answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        port = listener.getsockname()[1]
        stop = threading.Event()

        def close_each() -> None:
            listener.settimeout(0.2)
            while not stop.is_set():
                try:
                    conn, _ = listener.accept()
                except TimeoutError:
                    continue
                conn.recv(65536)
                conn.close()

        closer = threading.Thread(target=close_each, daemon=True)
        closer.start()
        try:
            rude = Endpoint(job_id=8, replica=0, host="127.0.0.1", port=port)
            pool.endpoints.ready_by[("t1", "rude")] = [rude, pool.stubs[1].endpoint(1)]
            for _ in range(3):
                r = httpx.post(
                    pool.proxy("rude", "/headers"), headers=pool.auth("t1"), content=b"again"
                )
                assert r.status_code == 200 and r.json()["body"] == "again"
            pool.endpoints.ready_by[("t1", "rude")] = [rude]
            r = httpx.get(pool.proxy("rude", "/v1/models"), headers=pool.auth("t1"))
            assert r.status_code == 502 and "closed the connection" in r.json()["detail"]
        finally:
            stop.set()
            closer.join(5)


def test_a_service_token_is_no_api_credential(pool: Pool) -> None:
    base = f"{pool.url}/v1/services/api2/tokens"
    secret = httpx.post(base, json={}, headers=pool.auth("t1")).json()["token"]
    svc = {"Authorization": f"Bearer {secret}"}
    assert httpx.get(f"{pool.url}/v1/jobs", headers=svc).status_code == 401
    assert httpx.post(base, json={}, headers=svc).status_code == 401
    assert httpx.get(base, headers=svc).status_code == 401


def test_a_long_sized_request_body_is_streamed_with_its_length(pool: Pool) -> None:
    pool.endpoints.ready_by[("t1", "long")] = [pool.stubs[0].endpoint(0)]
    body = b"x" * (3 << 20)  # past what the proxy reads before sending (and the API's body limit)
    r = httpx.post(pool.proxy("long", "/headers"), headers=pool.auth("t1"), content=body)
    assert r.status_code == 200, r.text[:300]
    got = r.json()
    assert len(got["body"]) == len(body)
    assert got["content_length"] == len(body) and not got["transfer_encoding"]
