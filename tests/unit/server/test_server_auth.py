"""Tenants, tokens and who may call what: 401 without or with a revoked token, 403 for a tenant on
admin endpoints and for an agent token outside /v1/agent, 404 for another tenant's job."""

from __future__ import annotations

import pytest
from server_kit import BOTH_STORES, Server, node, submit, tenant

STORES = BOTH_STORES  # its tests' server on SQLite and on PostgreSQL (conftest.py)


def test_no_token_is_401_and_says_bearer(server: Server) -> None:
    for method, path in [("GET", "/v1/jobs"), ("GET", "/v1/tenants"), ("GET", "/v1/nodes")]:
        r = server.client.request(method, path)
        assert r.status_code == 401
        assert r.headers["www-authenticate"] == "Bearer"
    r = server.client.get("/v1/jobs", headers={"Authorization": "Bearer xpp_not-a-token"})
    assert r.status_code == 401


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/v1/tenants", {"name": "x"}),
        ("GET", "/v1/tenants", None),
        ("POST", "/v1/tenants/a/tokens", {"name": "t"}),
        ("GET", "/v1/tokens", None),
        ("DELETE", "/v1/tokens/1", None),
        ("PUT", "/v1/queues/a", {"name": "a", "tenant": "a"}),
        ("POST", "/v1/nodes/n1/cordon", None),
        ("POST", "/v1/devices/n1-gpu0/cordon", None),
        ("POST", "/v1/agent/register", None),
        ("POST", "/v1/agent/heartbeat", {"node": "n1"}),
    ],
)
@pytest.mark.slow
def test_tenant_token_is_403_on_admin_and_agent_endpoints(
    server: Server, method: str, path: str, body: object
) -> None:
    token = tenant(server, "a")
    node(server, "n1", count=1)
    r = server.client.request(method, path, json=body, headers=server.as_(token))
    assert r.status_code == 403, r.text


def test_revoked_token_is_401(server: Server) -> None:
    token = tenant(server, "a")
    assert server.client.get("/v1/jobs", headers=server.as_(token)).status_code == 200
    ids = [t["id"] for t in server.client.get("/v1/tokens", headers=server.admin).json()]
    listed = server.client.get("/v1/tokens", headers=server.admin).json()
    assert all(t["token"] is None for t in listed)  # the secret is shown once only
    r = server.client.delete(f"/v1/tokens/{max(ids)}", headers=server.admin)
    assert r.status_code == 204
    assert server.client.get("/v1/jobs", headers=server.as_(token)).status_code == 401
    assert server.client.delete("/v1/tokens/999", headers=server.admin).status_code == 404


def test_admin_cannot_revoke_itself(server: Server) -> None:
    tokens = server.client.get("/v1/tokens", headers=server.admin).json()
    admin_id = next(t["id"] for t in tokens if t["role"] == "admin")
    assert server.client.delete(f"/v1/tokens/{admin_id}", headers=server.admin).status_code == 409


@pytest.mark.slow
def test_agent_token_only_speaks_the_agent_protocol(server: Server) -> None:
    tenant(server, "a")
    r = server.client.post("/v1/tenants/a/tokens", json={"role": "agent"}, headers=server.admin)
    agent = r.json()["token"]
    assert r.json()["tenant"] is None
    assert server.client.get("/v1/jobs", headers=server.as_(agent)).status_code == 403
    body = {"name": "n9", "cpu_milli": 1000, "memory_mib": 1024}
    headers = {**server.as_(agent), "X-Xpupool-Agent-Protocol": "2"}
    r = server.client.post("/v1/agent/register", json=body, headers=headers)
    assert r.status_code == 200, r.text


@pytest.mark.slow
def test_tenant_sees_and_touches_only_its_own_jobs(server: Server) -> None:
    a, b = tenant(server, "a"), tenant(server, "b")
    ja = submit(server, a, name="mine")
    jb = submit(server, b)
    for method, suffix in [("GET", ""), ("POST", "/cancel"), ("GET", "/logs")]:
        r = server.client.request(method, f"/v1/jobs/{ja['id']}{suffix}", headers=server.as_(b))
        assert r.status_code == 404, (method, suffix, r.text)
    assert [j["id"] for j in server.client.get("/v1/jobs", headers=server.as_(b)).json()] == [
        jb["id"]
    ]
    # a tenant cannot filter its way into another's jobs
    r = server.client.get("/v1/jobs", params={"tenant": "a"}, headers=server.as_(b))
    assert [j["id"] for j in r.json()] == [jb["id"]]
    # queues: own only
    assert [q["name"] for q in server.client.get("/v1/queues", headers=server.as_(b)).json()] == [
        "b"
    ]
    assert server.client.get("/v1/queues/a", headers=server.as_(b)).status_code == 404
    # the admin sees both
    listed = server.client.get("/v1/jobs", headers=server.admin).json()
    assert {j["id"] for j in listed} == {ja["id"], jb["id"]}


def test_tenant_cannot_submit_for_another_or_into_its_queue(server: Server) -> None:
    a = tenant(server, "a")
    tenant(server, "b")
    r = server.client.post("/v1/jobs", json={"tenant": "b"}, headers=server.as_(a))
    assert r.status_code == 422 and r.json()["field"] == "tenant"
    r = server.client.post("/v1/jobs", json={"queue": "b"}, headers=server.as_(a))
    assert r.status_code == 422 and r.json()["field"] == "queue"


def test_tenant_and_queue_names_are_unique(server: Server) -> None:
    tenant(server, "a")
    r = server.client.post("/v1/tenants", json={"name": "a"}, headers=server.admin)
    assert r.status_code == 409
    r = server.client.post("/v1/tenants/zzz/tokens", json={}, headers=server.admin)
    assert r.status_code == 404
