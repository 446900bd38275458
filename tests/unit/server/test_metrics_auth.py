"""Who may read ``/metrics`` (issue 43 item 14): the exposition names every tenant, queue and node,
so by default (``--metrics-auth token``) only the admin token and metrics tokens read it; a
metrics token reads nothing else; ``--metrics-auth open`` is the operator's choice to serve it to
anyone. On a real server behind its HTTP workers: ``tests/integration/test_http_limits.py``."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from server_kit import Server, tenant

from xpupool.server.app import create_app


def _metrics_token(server: Server) -> str:
    r = server.client.post(
        "/v1/tokens", json={"role": "metrics", "name": "prom"}, headers=server.admin
    )
    assert r.status_code == 201, r.text
    assert (r.json()["role"], r.json()["tenant"]) == ("metrics", None)
    return str(r.json()["token"])


@pytest.mark.slow
def test_metrics_need_the_admin_or_a_metrics_token(server: Server) -> None:
    tenant(server, "secret-team")
    r = server.client.get("/metrics")
    assert r.status_code == 401
    assert r.headers["www-authenticate"] == "Bearer"
    assert "secret-team" not in r.text
    r = server.client.get("/metrics", headers=server.as_("xpp_unknown"))
    assert r.status_code == 401
    r = server.client.get("/metrics", headers=server.as_(tenant(server, "nosy")))
    assert r.status_code == 403
    assert "metrics token" in r.json()["reason"]
    assert "secret-team" in server.client.get("/metrics", headers=server.admin).text
    r = server.client.get("/metrics", headers=server.as_(_metrics_token(server)))
    assert r.status_code == 200 and "secret-team" in r.text


@pytest.mark.slow
def test_a_metrics_token_reads_nothing_else(server: Server) -> None:
    reader = server.as_(_metrics_token(server))
    assert server.client.get("/v1/jobs", headers=reader).status_code == 403
    assert server.client.get("/v1/nodes", headers=reader).status_code == 403
    assert server.client.get("/v1/tenants", headers=reader).status_code == 403
    r = server.client.post("/v1/agent/heartbeat", json={"node": "n1"}, headers=reader)
    assert r.status_code == 403
    r = server.client.post(
        "/signin",
        data={"token": reader["Authorization"].removeprefix("Bearer ")},
        headers={"Origin": "http://testserver"},
    )
    assert r.status_code == 401  # no dashboard either


@pytest.mark.slow
def test_a_metrics_token_belongs_to_no_tenant(server: Server) -> None:
    tenant(server, "lab")
    r = server.client.post("/v1/tenants/lab/tokens", json={"role": "metrics"}, headers=server.admin)
    assert r.status_code == 422
    assert r.json()["field"] == "role"
    r = server.client.post(
        "/v1/tokens", json={"role": "metrics", "node": "n1"}, headers=server.admin
    )
    assert r.status_code == 422


@pytest.mark.slow
def test_open_metrics_when_the_operator_says_so(server: Server) -> None:
    tenant(server, "visible")
    with TestClient(create_app(server.plane, background=False, metrics_auth="open")) as client:
        r = client.get("/metrics")
        assert r.status_code == 200 and "visible" in r.text
