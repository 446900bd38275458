"""``xpupool serve | services | service``: what the options build (the body the server's own
schema checks, errors naming the option or field before anything is sent), and the client's
service calls over its ``send`` seam: the path, the query and the view read back."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest
from rich.console import Console

from xpupool.client import Client, ClientConfig
from xpupool.client._wire import Answer
from xpupool.client.cli_jobs import build_job
from xpupool.client.cli_services import (
    detail,
    replica_bounds,
    service_body,
    service_name,
    services_table,
)
from xpupool.model.errors import RequestError

VIEW: dict[str, Any] = {
    "name": "web", "tenant": "a", "state": "ready", "reason": "1/1 replicas ready",
    "url": "/v1/services/web/proxy/", "generation": 2, "desired": 1, "ready": 1, "min": 1,
    "max": 3, "port": 8000, "requests_per_s": 3.25, "p99_ms": 12.5,
    "spec": {"name": "web", "job": {"image": "srv:1"}, "port": 8000},
    "replicas": [{"job_id": 7, "name": "web-3", "generation": 2, "state": "running",
                  "ready": True, "draining": False, "node": "n1", "host": "10.0.0.5",
                  "port": 31002}],
    "created_at": 1.0, "updated_at": 2.0,
    "events": [{"at": 1.0, "state": "pending", "reason": "created"}],
}  # fmt: skip


def test_replica_bounds_take_a_count_or_a_range() -> None:
    assert replica_bounds("2") == {"min": 2}
    assert replica_bounds("1..4") == {"min": 1, "max": 4}
    assert replica_bounds(None) is None
    for bad in ("", "two", "1..", "..3", "-1"):
        with pytest.raises(RequestError) as err:
            replica_bounds(bad)
        assert err.value.field == "--replicas"


def test_the_name_comes_from_the_option_the_model_the_image_or_the_program() -> None:
    job = build_job((), ["/usr/bin/Python3", "-m", "http.server"], None, {}, {})
    assert service_name("mine", None, job) == "mine"
    assert service_name(None, "qwen2.5-7b", job) == "qwen2.5-7b"
    assert service_name(None, None, job) == "python3"
    image = build_job((), None, None, {"image": "ghcr.io/org/My_Server:1.2"}, {})
    assert service_name(None, None, image) == "my_server"


def test_the_body_is_checked_by_the_servers_schema_naming_the_field() -> None:
    job = build_job((), ["serve"], None, {"image": "srv:1"}, {"K": "V"})
    body = service_body("web", job, 8000, "1..3", "/ready", 4.0, "2m", None)
    assert body.replicas.min == 1 and body.replicas.upper == 3
    assert body.readiness.path == "/ready" and body.scaling.window_s == 120.0
    assert body.job.env == {"K": "V"} and body.port == 8000
    with pytest.raises(RequestError) as err:
        service_body("web", job, None, "3..2", None, None, None, None)
    assert err.value.field == "replicas.max"
    with pytest.raises(RequestError) as err:
        service_body("web", job, None, None, "health", None, None, None)
    assert err.value.field == "readiness.path"
    with pytest.raises(RequestError) as err:
        service_body("web", job, None, None, None, None, "soon", None)
    assert err.value.field == "--window"


def test_the_client_sends_service_calls_and_reads_the_view() -> None:
    sent: list[tuple[str, str, bytes | None]] = []

    def send(method: str, target: str, headers: Mapping[str, str], body: bytes | None) -> Answer:
        sent.append((method, target, body))
        if method == "DELETE":
            return Answer(204, "", b"")
        listing = method == "GET" and target.partition("?")[0] == "/v1/services"
        answer = [VIEW] if listing else VIEW
        return Answer(201 if method == "POST" else 200, "", json.dumps(answer).encode())

    client = Client(ClientConfig("http://pool:8080", "t", "XPUPOOL_TOKEN"), send=send)
    job = build_job((), None, None, {"image": "srv:1"}, {})
    made = client.create_service(service_body("web", job, 8000, None, None, None, None, None))
    assert made.replicas[0].job_id == 7 and made.state.value == "ready"
    assert json.loads(sent[0][2] or b"{}") == {
        "name": "web",
        "job": {"image": "srv:1"},
        "port": 8000,
    }
    assert [s.name for s in client.services("a")] == ["web"]
    assert client.service("web", "a").p99_ms == 12.5
    assert client.stop_service("web").name == "web"
    assert client.start_service("web", "a").name == "web"
    client.delete_service("web")
    assert [(m, t) for m, t, _ in sent[1:]] == [
        ("GET", "/v1/services?tenant=a"),
        ("GET", "/v1/services/web?tenant=a"),
        ("POST", "/v1/services/web/stop"),
        ("POST", "/v1/services/web/start?tenant=a"),
        ("DELETE", "/v1/services/web"),
    ]
    console = Console(width=160, record=True)
    console.print(services_table([made]))
    console.print(detail(made))
    text = console.export_text()
    assert "/v1/services/web/proxy/" in text and "1/1" in text and "12.5 ms" in text
    assert "web-3" in text and "10.0.0.5:31002" in text and "created" in text
