"""Services (``/v1/services``): the API's edge and the controller's decisions, on a real plane
and SQLite store with the test's clock; replicas are driven through the agent protocol as a node
would, and readiness is probed over real HTTP against a stdlib server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from server_kit import (
    BOTH_STORES,
    Server,
    heartbeat,
    job,
    node,
    node_body,
    reopen,
    report,
    row_counts,
    run_loop,
    tenant,
)

from xpupool.server.plane import service_rows
from xpupool.server.service_controller import ServiceController
from xpupool.server.service_endpoints import Endpoint

STORES = BOTH_STORES  # its tests' server on SQLite and on PostgreSQL (conftest.py)


class _Health(BaseHTTPRequestHandler):
    status = 200

    def do_GET(self) -> None:
        self.send_response(type(self).status)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@dataclass
class Replica:
    """A replica's HTTP server: answers GET with ``status`` (200: ready)."""

    server: ThreadingHTTPServer
    handler: type[_Health]

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def answer(self, status: int) -> None:
        self.handler.status = status


@pytest.fixture
def replicas() -> Iterator[list[Replica]]:
    started: list[Replica] = []
    yield started
    for r in started:
        r.server.shutdown()
        r.server.server_close()


def http_replica(started: list[Replica]) -> Replica:
    handler = type("Health", (_Health,), {"status": 200})
    srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    started.append(Replica(srv, handler))
    return started[-1]


@dataclass
class Counts:
    """The proxy's counts as a test sets them (the :class:`Traffic` protocol)."""

    total: int = 0
    at: dict[int, int] = field(default_factory=dict)

    def in_flight(self, tenant: str, service: str) -> int:
        return self.total

    def in_flight_at(self, endpoint: Endpoint) -> int:
        return self.at.get(endpoint.job_id, 0)

    def rate(self, tenant: str, service: str) -> tuple[float, float | None]:
        return (12.5, 40.0) if self.total else (0.0, None)


def agent_node(srv: Server, name: str = "n1") -> None:
    body = {**node_body(name, count=0), "labels": {"xpupool/address": "127.0.0.1"}}
    r = srv.client.post("/v1/agent/register", json=body, headers=srv.admin)
    assert r.status_code == 200, r.text


def create(srv: Server, token: str, name: str = "web", **body: Any) -> Any:
    service = {"name": name, "job": {"command": ["serve"]}, **body}
    return srv.client.post("/v1/services", json=service, headers=srv.as_(token))


def show(srv: Server, token: str, name: str = "web") -> dict[str, Any]:
    r = srv.client.get(f"/v1/services/{name}", headers=srv.as_(token))
    assert r.status_code == 200, r.text
    return dict(r.json())


def keeper(srv: Server) -> ServiceController:
    """The plane's service controller, as the app's start makes it (its passes called here)."""
    srv.plane.service_endpoints = controller = ServiceController(srv.plane)
    return controller


def probe(controller: ServiceController) -> None:
    """The probes that are due, run to their end."""

    async def once() -> None:
        async with httpx.AsyncClient(trust_env=False) as client:
            tasks = controller.prober.start_due(client, controller.plane.monotonic())
            await asyncio.gather(*tasks)

    run_loop(once())


def settle(controller: ServiceController) -> None:
    """A pass, the probes it made due, and the pass that reads them: as the loop runs them."""
    controller.reconcile()
    probe(controller)
    controller.reconcile()


def step(srv: Server, controller: ServiceController) -> None:
    """A controller pass, then the scheduler's, as the server's loops run them."""
    controller.reconcile()
    srv.schedule()


def run_replicas(srv: Server, ports: dict[int, int], node_name: str = "n1") -> None:
    """The node's agent takes what it is handed and reports each replica running on its port."""
    heartbeat(srv, node_name)
    heartbeat(
        srv,
        node_name,
        [{**report(job_id, 0, "running"), "ports": [port]} for job_id, port in ports.items()],
    )


def test_a_service_is_created_listed_shown_and_deleted(server: Server) -> None:
    a = tenant(server, "a")
    r = create(server, a, replicas={"min": 2, "max": 4})
    assert r.status_code == 201, r.text
    got = r.json()
    assert got["state"] == "pending" and got["url"] == "/v1/services/web/proxy/"
    assert (got["min"], got["max"], got["desired"], got["generation"]) == (2, 4, 2, 1)
    assert got["events"][0]["reason"] == "created"
    assert [s["name"] for s in server.client.get("/v1/services", headers=server.as_(a)).json()] == [
        "web"
    ]
    assert create(server, a).status_code == 409
    gone = server.client.delete("/v1/services/web", headers=server.as_(a))
    assert gone.status_code == 204
    assert server.client.get("/v1/services/web", headers=server.as_(a)).status_code == 404


def replica_jobs(srv: Server, token: str, name: str = "web") -> list[dict[str, Any]]:
    return list(show(srv, token, name)["replicas"])


def test_a_replica_is_started_probed_and_becomes_a_ready_endpoint(
    server: Server, replicas: list[Replica]
) -> None:
    agent_node(server)
    a = tenant(server, "a")
    web = http_replica(replicas)
    assert (
        create(server, a, readiness={"path": "/ready", "interval_s": 1, "timeout_s": 1}).status_code
        == 201
    )
    controller = keeper(server)
    step(server, controller)
    (one,) = replica_jobs(server, a)
    assert one["name"] == "web-1" and one["generation"] == 1 and not one["ready"]
    assert job(server, one["job_id"], a)["name"] == "web-1"  # an ordinary job of its tenant
    run_replicas(server, {one["job_id"]: web.port})
    controller.reconcile()
    assert show(server, a)["state"] == "starting"
    web.answer(503)
    probe(controller)
    controller.reconcile()
    got = show(server, a)
    assert got["state"] == "starting" and "answered 503" in got["reason"]
    web.answer(200)
    server.clock.advance(1)
    probe(controller)
    controller.reconcile()
    got = show(server, a)
    assert got["state"] == "ready" and got["ready"] == 1, got
    assert got["replicas"][0]["ready"] and got["replicas"][0]["port"] == web.port
    assert controller.ready("a", "web") == (Endpoint(one["job_id"], 0, "127.0.0.1", web.port),)
    assert controller.ready("b", "web") == ()


@pytest.mark.parametrize(
    ("body", "where", "why"),
    [
        ({"replicas": {"min": 3, "max": 2}}, "replicas.max", "at least min"),
        ({"replicas": {"min": 65}}, "replicas.min", "64"),
        ({"readiness": {"path": "health"}}, "readiness.path", ""),
        ({"readiness": {"interval_s": 1, "timeout_s": 5}}, "readiness.timeout_s", "interval_s"),
        ({"restart": {"backoff_s": 10, "backoff_max_s": 1}}, "restart.backoff_max_s", "backoff"),
        ({"port": 70000}, "port", ""),
        ({"port": 8000}, "port", "$PORT"),  # a host process: the agent picks its port
        ({"job": {"command": ["x"], "port": 0}}, "job.port", "service's port"),
        ({"job": {"command": ["x"], "max_retries": 3}}, "job.max_retries", "restart"),
        ({"job": {"command": ["x"], "name": "mine"}}, "job.name", "<service>-<n>"),
        ({"job": {}}, "job.command", "command to run"),
        ({"job": {"command": ["x"], "queue": "other"}}, "job.queue", "no queue"),
        ({"name": "Web"}, "name", ""),
        ({"tenant": "b"}, "tenant", "only for itself"),
        ({"colour": "red"}, "colour", ""),
        # a replica mounts a volume the admin declared, by name: never a path of the host
        (
            {"job": {"command": ["x"], "volumes": [{"name": "m", "path": "/c", "host": "/etc"}]}},
            "job.volumes[0].host",
            "",
        ),
    ],
)
def test_a_bad_service_is_refused_naming_the_field_and_stores_nothing(
    server: Server, body: dict[str, Any], where: str, why: str
) -> None:
    a = tenant(server, "a")
    tenant(server, "b")
    before = row_counts(server)
    r = create(server, a, **body)
    assert r.status_code == 422, r.text
    assert r.json()["field"] == where and why in r.json()["reason"], r.json()
    assert row_counts(server) == before


def test_a_tenant_sees_and_touches_only_its_own_services(server: Server) -> None:
    a, b = tenant(server, "a"), tenant(server, "b")
    assert create(server, a).status_code == 201
    assert create(server, b).status_code == 201  # the same name, another tenant's
    before = row_counts(server)
    assert server.client.get("/v1/services/web", headers=server.as_(b)).json()["tenant"] == "b"
    change = {"name": "web", "job": {"command": ["other"]}}
    assert create(server, b, name="mine").status_code == 201
    for answer in (
        server.client.get("/v1/services/mine", headers=server.as_(a)),
        server.client.put(
            "/v1/services/mine", json={**change, "name": "mine"}, headers=server.as_(a)
        ),
        server.client.delete("/v1/services/mine", headers=server.as_(a)),
    ):
        assert answer.status_code == 404, answer.text
    listed = server.client.get("/v1/services", headers=server.as_(a)).json()
    assert [(s["tenant"], s["name"]) for s in listed] == [("a", "web")]
    everyone = server.client.get("/v1/services", headers=server.admin).json()
    assert [(s["tenant"], s["name"]) for s in everyone] == [
        ("a", "web"),
        ("b", "mine"),
        ("b", "web"),
    ]
    assert server.client.get("/v1/services/mine", headers=server.admin).json()["tenant"] == "b"
    both = server.client.get("/v1/services/web", headers=server.admin)
    assert both.status_code == 422 and both.json()["field"] == "tenant", both.text
    assert (
        server.client.get("/v1/services/web?tenant=a", headers=server.admin).json()["tenant"] == "a"
    )
    theirs = {**change, "tenant": "b"}
    other = server.client.put("/v1/services/web", json=theirs, headers=server.as_(a))
    assert other.status_code == 422 and other.json()["field"] == "tenant"
    renamed = server.client.put(
        "/v1/services/web", json={**change, "name": "x"}, headers=server.as_(a)
    )
    assert renamed.status_code == 422 and renamed.json()["field"] == "name"
    assert row_counts(server)["services"] == before["services"] + 1
    assert create(server, server.admin_token, name="adm").json()["field"] == "tenant"
    made = create(server, server.admin_token, name="adm", tenant="a")
    assert made.status_code == 201 and made.json()["tenant"] == "a"


def test_a_replica_that_ends_is_replaced_after_a_doubling_backoff(
    server: Server, replicas: list[Replica]
) -> None:
    agent_node(server)
    a = tenant(server, "a")
    web = http_replica(replicas)
    create(server, a, restart={"backoff_s": 2, "backoff_max_s": 5, "reset_after_s": 30})
    controller = keeper(server)
    started = []
    for wait in (2, 4, 5):  # doubled, capped
        step(server, controller)
        (one,) = replica_jobs(server, a)
        started.append(one["job_id"])
        run_replicas(server, {one["job_id"]: web.port})
        heartbeat(server, "n1", [report(one["job_id"], 0, "failed", 1)])
        controller.reconcile()
        got = show(server, a)
        assert got["state"] == "restarting", got
        assert (
            got["reason"]
            == f"restarting: replica web-{len(started)} exited 1, next try in {wait} s"
        )
        assert got["replicas"] == []
        server.clock.advance(wait - 0.5)
        step(server, controller)
        assert replica_jobs(server, a) == []  # not before its time: never a hot loop
        server.clock.advance(0.5)
    step(server, controller)
    (one,) = replica_jobs(server, a)
    assert one["name"] == "web-4"
    # ready for reset_after_s: the next end waits backoff_s again
    run_replicas(server, {one["job_id"]: web.port})
    settle(controller)
    assert show(server, a)["state"] == "ready"
    server.clock.advance(30)
    controller.reconcile()
    heartbeat(server, "n1", [report(one["job_id"], 0, "failed", 3)])
    controller.reconcile()
    assert show(server, a)["reason"].endswith("exited 3, next try in 2 s")
    # a replica cancelled by someone else is replaced too
    server.clock.advance(2)
    step(server, controller)
    (two,) = replica_jobs(server, a)
    server.client.post(f"/v1/jobs/{two['job_id']}/cancel", headers=server.as_(a))
    controller.reconcile()
    assert "web-5 cancelled" in show(server, a)["reason"]
    reasons = [e["reason"] for e in show(server, a)["events"]]
    assert "replica web-1 exited 1; next try in 2 s" in reasons
    assert f"started replica web-2 (job {started[1]}), generation 1" in reasons


def stopped(srv: Server, job_ids: list[int], node_name: str = "n1") -> list[int]:
    """The node's agent stops what it is told to; the job ids it was told to stop."""
    told = [j for j, _ in heartbeat(srv, node_name)["stop"]]
    heartbeat(srv, node_name, [report(j, 0, "stopped") for j in told])
    assert sorted(told) == sorted(job_ids)
    return told


def test_a_change_rolls_one_replica_at_a_time_never_below_the_ready_count(
    server: Server, replicas: list[Replica]
) -> None:
    agent_node(server)
    a = tenant(server, "a")
    spec = {"name": "web", "job": {"command": ["serve"]}, "replicas": {"min": 2}}
    assert create(server, a, **{k: v for k, v in spec.items() if k != "name"}).status_code == 201
    controller = keeper(server)
    ports: dict[int, int] = {}

    def run_new() -> list[int]:
        step(server, controller)
        new = [r["job_id"] for r in replica_jobs(server, a) if r["job_id"] not in ports]
        for job_id in new:
            ports[job_id] = http_replica(replicas).port
        run_replicas(server, {j: ports[j] for j in new})
        return new

    old = run_new()
    settle(controller)
    assert show(server, a)["state"] == "ready" and len(old) == 2
    same = server.client.put(
        "/v1/services/web", json={**spec, "replicas": {"min": 2, "max": 2}}, headers=server.as_(a)
    )
    assert same.json()["generation"] == 1  # bounds only: nothing rolls
    changed = {**spec, "job": {"command": ["serve"], "env": {"V": "2"}}}
    r = server.client.put("/v1/services/web", json=changed, headers=server.as_(a))
    assert r.status_code == 200 and r.json()["generation"] == 2, r.text
    seen_ready = []
    for _ in range(2):
        new = run_new()  # one replica of generation 2 (a surge of one)
        assert len(new) == 1
        got = show(server, a)
        assert got["state"] == "updating" and len(got["replicas"]) == 3
        assert job(server, new[0], a)["env"] == {"V": "2"}
        controller.reconcile()  # the new one is not ready yet: no old one goes
        assert not any(r["draining"] for r in replica_jobs(server, a))
        settle(controller)  # ready: one old one drained (nothing in flight) and stopped
        draining = [r["job_id"] for r in replica_jobs(server, a) if r["draining"]]
        assert len(draining) == 1 and draining[0] in old
        seen_ready.append(show(server, a)["ready"])
        stopped(server, draining)
    controller.reconcile()
    got = show(server, a)
    assert got["state"] == "ready" and got["generation"] == 2, got
    assert sorted(r["generation"] for r in got["replicas"]) == [2, 2]
    assert min(seen_ready) >= 2  # never fewer ready than desired while it rolled
    assert all(job(server, j, a)["state"] == "cancelled" for j in old)


def test_scaling_goes_up_at_once_and_down_after_the_window_draining_first(
    server: Server, replicas: list[Replica]
) -> None:
    agent_node(server)
    a = tenant(server, "a")
    body = {
        "replicas": {"min": 1, "max": 3},
        "scaling": {"target_in_flight": 4, "window_s": 60, "drain_timeout_s": 30},
    }
    assert create(server, a, **body).status_code == 201
    counts = Counts()
    server.plane.service_traffic = counts  # type: ignore[attr-defined]  # the proxy's, in part B
    controller = keeper(server)
    ports: dict[int, int] = {}

    def run_new() -> None:
        step(server, controller)
        new = [r["job_id"] for r in replica_jobs(server, a) if r["job_id"] not in ports]
        for job_id in new:
            ports[job_id] = http_replica(replicas).port
        run_replicas(server, {j: ports[j] for j in new})
        settle(controller)

    run_new()
    counts.total = 9  # 9 in flight on 1 ready: 3 wanted (capped at max)
    run_new()
    got = show(server, a)
    assert got["desired"] == 3 and got["ready"] == 3 and got["state"] == "ready", got
    assert (got["requests_per_s"], got["p99_ms"]) == (12.5, 40.0)
    assert "scaled from 1 to 3 replicas" in [e["reason"] for e in got["events"]]
    counts.total = 1  # wants 1, but only once the window shows it
    controller.reconcile()
    server.clock.advance(59)
    controller.reconcile()
    assert show(server, a)["desired"] == 3
    counts.total = 5  # a burst inside the window: the window's peak (2) is what it goes to
    controller.reconcile()
    counts.total = 1
    server.clock.advance(1)
    first, second, third = sorted(ports)
    counts.at = {third: 1}  # the one taken away (the newest) still answers a request
    controller.reconcile()
    got = show(server, a)
    assert got["desired"] == 2
    draining = [r for r in got["replicas"] if r["draining"]]
    assert [r["job_id"] for r in draining] == [third] and not draining[0]["ready"]
    assert [e.job_id for e in controller.ready("a", "web")] == [first, second]
    assert heartbeat(server, "n1")["stop"] == []  # in flight: not stopped yet
    controller.reconcile()
    assert heartbeat(server, "n1")["stop"] == []
    counts.at = {}
    controller.reconcile()
    stopped(server, [third])
    controller.reconcile()
    assert [r["job_id"] for r in replica_jobs(server, a)] == [first, second]
    assert show(server, a)["state"] == "ready"


def test_a_drain_ends_at_its_timeout_whatever_is_in_flight(
    server: Server, replicas: list[Replica]
) -> None:
    agent_node(server)
    a = tenant(server, "a")
    body = {
        "replicas": {"min": 1, "max": 2},
        "scaling": {"target_in_flight": 1, "window_s": 0, "drain_timeout_s": 30},
    }
    create(server, a, **body)
    counts = Counts(total=2)
    server.plane.service_traffic = counts  # type: ignore[attr-defined]
    controller = keeper(server)
    step(server, controller)
    ids = [r["job_id"] for r in replica_jobs(server, a)]
    run_replicas(server, {j: http_replica(replicas).port for j in ids})
    settle(controller)
    assert show(server, a)["ready"] == 2
    counts.total, counts.at = 0, {max(ids): 5}
    controller.reconcile()  # the window of 0 s: it goes down now, draining the newest
    controller.reconcile()
    assert heartbeat(server, "n1")["stop"] == []
    server.clock.advance(30)
    controller.reconcile()
    stopped(server, [max(ids)])


def test_a_service_deleted_during_a_pass_leaves_no_replica_running(server: Server) -> None:
    agent_node(server)
    a = tenant(server, "a")
    create(server, a)
    controller = keeper(server)
    with server.plane.db.connect() as conn:
        row = service_rows.get(conn, "a", "web")  # as the pass read it, before the delete
    assert row is not None
    assert server.client.delete("/v1/services/web", headers=server.as_(a)).status_code == 204
    controller._service(row, [], {})  # the rest of that pass
    jobs = server.client.get("/v1/jobs", headers=server.as_(a)).json()
    assert all(j["state"] == "cancelled" for j in jobs), jobs
    assert row_counts(server)["service_events"] == 0


def test_a_restarted_server_finds_its_replicas_again_and_starts_no_other(
    server: Server, replicas: list[Replica]
) -> None:
    agent_node(server)
    a = tenant(server, "a")
    assert server.plane.service_endpoints.ready("a", "web") == ()  # no controller yet: none
    create(server, a)
    controller = keeper(server)
    step(server, controller)
    (one,) = replica_jobs(server, a)
    web = http_replica(replicas)
    run_replicas(server, {one["job_id"]: web.port})
    settle(controller)
    assert show(server, a)["state"] == "ready"
    again = reopen(server)
    with again.client:
        controller = keeper(again)
        heartbeat(again, "n1", [{**report(one["job_id"], 0, "running"), "ports": [web.port]}])
        settle(controller)
        got = show(again, a)
        assert got["state"] == "ready", got
        assert [r["job_id"] for r in got["replicas"]] == [one["job_id"]]
        assert len(again.client.get("/v1/jobs", headers=again.as_(a)).json()) == 1
    again.plane.db.dispose()


def test_a_model_service_runs_the_catalog_job_on_its_runtimes_port(server: Server) -> None:
    node(server, "g1", count=1, runtime="docker")
    a = tenant(server, "a")
    r = create(server, a, name="qwen", job={"model": {"name": "qwen2.5-7b"}})
    assert r.status_code == 201, r.text
    assert r.json()["port"] == 8000  # the runtime's, taken when the service was created
    step(server, keeper(server))
    (one,) = replica_jobs(server, a, "qwen")
    replica = job(server, one["job_id"], a)
    assert replica["image"].startswith("vllm/") and replica["port"] == 8000
    assert replica["command"][replica["command"].index("--port") + 1] == "8000"
    wrong = create(server, a, name="nope", job={"model": {"name": "qwen9-1t"}})
    assert wrong.status_code == 422 and wrong.json()["field"] == "job.model.name"


def test_a_step_of_the_wall_clock_neither_stalls_nor_skips_the_backoff(
    server: Server, replicas: list[Replica]
) -> None:
    agent_node(server)
    a = tenant(server, "a")
    create(server, a, restart={"backoff_s": 4})
    controller = keeper(server)
    step(server, controller)
    (one,) = replica_jobs(server, a)
    run_replicas(server, {one["job_id"]: http_replica(replicas).port})
    heartbeat(server, "n1", [report(one["job_id"], 0, "failed", 1)])
    controller.reconcile()
    server.clock.step(3600)  # NTP sets the wall clock an hour on: the wait is not over
    step(server, controller)
    assert replica_jobs(server, a) == []
    server.clock.step(-7200)  # and back past where it was: the wait does not grow
    server.clock.advance(4)
    step(server, controller)
    assert [r["name"] for r in replica_jobs(server, a)] == ["web-2"]


def test_a_stopped_service_drains_its_replicas_and_starts_none_until_started(
    server: Server, replicas: list[Replica]
) -> None:
    """Stop: the replicas leave the endpoints and end, nothing restarts them (not a pass, not
    a restart of the server), the endpoint answers 503 naming the state; start: back to min."""
    agent_node(server)
    a = tenant(server, "a")
    create(server, a, replicas={"min": 2, "max": 3})
    controller = keeper(server)
    step(server, controller)
    ids = [r["job_id"] for r in replica_jobs(server, a)]
    run_replicas(server, {j: http_replica(replicas).port for j in ids})
    settle(controller)
    assert show(server, a)["state"] == "ready"
    r = server.client.post("/v1/services/web/stop", headers=server.as_(a))
    assert r.status_code == 200, r.text
    got = r.json()
    assert (got["state"], got["desired"]) == ("stopped", 0), got
    assert got["events"][-1]["state"] == "stopped"
    controller.reconcile()
    assert controller.ready("a", "web") == ()
    assert all(r["draining"] for r in replica_jobs(server, a))
    stopped(server, ids)
    for _ in range(3):
        server.clock.advance(400)  # past any restart backoff
        step(server, controller)
    got = show(server, a)
    assert got["state"] == "stopped" and got["replicas"] == [], got
    assert len(server.client.get("/v1/jobs", headers=server.as_(a)).json()) == 2
    answer = server.client.get("/v1/services/web/proxy/v1/models", headers=server.as_(a))
    assert answer.status_code == 503 and "stopped" in answer.json()["detail"], answer.text
    again = reopen(server)  # the stop is stored: a restarted plane starts nothing either
    with again.client:
        controller = keeper(again)
        step(again, controller)
        assert show(again, a)["state"] == "stopped"
        assert len(again.client.get("/v1/jobs", headers=again.as_(a)).json()) == 2
        r = again.client.post("/v1/services/web/start", headers=again.as_(a))
        assert r.status_code == 200, r.text
        assert (r.json()["state"], r.json()["desired"]) == ("pending", 2)
        step(again, controller)
        got = show(again, a)
        assert len([r for r in got["replicas"] if not r["draining"]]) == 2, got
        reasons = [e["reason"] for e in got["events"]]
        assert reasons.index("stopped") < reasons.index("started"), reasons
    again.plane.db.dispose()


def test_refused_stops_and_starts_name_the_reason_and_change_nothing(server: Server) -> None:
    a = tenant(server, "a")
    b = tenant(server, "b")
    create(server, a)
    before = row_counts(server)
    r = server.client.post("/v1/services/web/start", headers=server.as_(a))  # not stopped
    assert r.status_code == 409 and "not stopped" in r.json()["reason"], r.text
    r = server.client.post("/v1/services/web/stop", headers=server.as_(b))  # a's: not b's
    assert r.status_code == 404, r.text
    assert row_counts(server) == before and show(server, a)["state"] == "pending"
    assert server.client.post("/v1/services/web/stop", headers=server.as_(a)).status_code == 200
    before = row_counts(server)
    r = server.client.post("/v1/services/web/stop", headers=server.as_(a))
    assert r.status_code == 409 and "stopped already" in r.json()["reason"], r.text
    assert row_counts(server) == before
    assert server.client.delete("/v1/services/web", headers=server.as_(a)).status_code == 204
    before = row_counts(server)
    for verb in ("stop", "start"):
        r = server.client.post(f"/v1/services/web/{verb}", headers=server.as_(a))
        assert r.status_code == 404 and "not found" in r.json()["reason"], r.text
    assert row_counts(server) == before


def test_a_pass_that_read_the_service_before_its_stop_does_not_undo_it(
    server: Server,
) -> None:
    """The controller's pass and a stop may cross: what the pass read before the stop is not
    written over it, and the next pass drains what it started."""
    agent_node(server)
    a = tenant(server, "a")
    create(server, a)
    controller = keeper(server)
    with server.plane.db.connect() as conn:
        row = service_rows.get(conn, "a", "web")  # as the pass read it, before the stop
    assert row is not None
    assert server.client.post("/v1/services/web/stop", headers=server.as_(a)).status_code == 200
    controller._service(row, [], {})  # the rest of that pass: it starts a replica
    assert show(server, a)["state"] == "stopped"
    controller.reconcile()
    got = show(server, a)
    assert got["state"] == "stopped" and all(r["draining"] for r in got["replicas"]), got


def test_a_start_after_a_stop_leaves_no_restart_backoff(server: Server) -> None:
    """A crash-looping service stopped and started by its tenant starts its replica at once:
    the start is the tenant's, not one more restart."""
    agent_node(server)
    a = tenant(server, "a")
    create(server, a, restart={"backoff_s": 100, "backoff_max_s": 100})
    controller = keeper(server)
    step(server, controller)
    (one,) = replica_jobs(server, a)
    heartbeat(server, "n1", [report(one["job_id"], 0, "failed", 1)])
    controller.reconcile()
    assert show(server, a)["state"] == "restarting"
    assert server.client.post("/v1/services/web/stop", headers=server.as_(a)).status_code == 200
    controller.reconcile()
    assert server.client.post("/v1/services/web/start", headers=server.as_(a)).status_code == 200
    step(server, controller)
    (two,) = replica_jobs(server, a)
    assert two["job_id"] != one["job_id"] and show(server, a)["state"] == "pending"


def test_a_restarted_plane_keeps_a_crash_loops_backoff(server: Server) -> None:
    """The backoff's step and the time of the next try are stored in the service's row: after
    a restart of the plane a crash-looping replica waits out the backoff it had reached and the
    next end doubles it again, instead of both starting over from ``backoff_s``."""
    agent_node(server)
    a = tenant(server, "a")
    create(server, a, restart={"backoff_s": 2, "backoff_max_s": 100, "reset_after_s": 300})
    controller = keeper(server)
    for wait in (2, 4, 8):
        step(server, controller)
        (one,) = replica_jobs(server, a)
        heartbeat(server, "n1", [report(one["job_id"], 0, "failed", 1)])
        controller.reconcile()
        assert show(server, a)["reason"].endswith(f"next try in {wait} s")
        if wait < 8:
            server.clock.advance(wait)
    server.clock.advance(3)  # 5 s of the 8 left when the plane restarts
    again = reopen(server)
    with again.client:
        controller = keeper(again)
        step(again, controller)
        assert replica_jobs(again, a) == []  # not at once: the wait goes on
        got = show(again, a)
        assert got["state"] == "restarting" and got["reason"].endswith("exited 1, next try in 5 s")
        again.clock.advance(5)
        step(again, controller)
        (four,) = replica_jobs(again, a)
        heartbeat(again, "n1", [report(four["job_id"], 0, "failed", 1)])
        controller.reconcile()
        assert show(again, a)["reason"].endswith("next try in 16 s")  # the 4th end: doubled
    again.plane.db.dispose()
