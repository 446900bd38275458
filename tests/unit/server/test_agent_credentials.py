"""Agent credentials in-process (issue 18, item 1): the in-process agent's principal, the bootstrap
exchange's all-or-nothing transaction, token expiry on the clock, the audit log's rules and bound.
The same checks against a real server and real agents: tests/integration/test_node_identity.py."""

from __future__ import annotations

import pytest
from server_kit import BOTH_STORES, Server, node, node_body

from xpupool.model.errors import Forbidden
from xpupool.server.audit import AuditKeep
from xpupool.server.audit_http import audited
from xpupool.server.auth import Principal
from xpupool.server.inprocess_agent import PlaneTransport
from xpupool.server.schemas.agent_protocol import Heartbeat, NodeIn
from xpupool.server.schemas.tenants import TokenIn
from xpupool.server.services import node_identity, tenants
from xpupool.server.services.node_identity import in_process_principal

STORES = BOTH_STORES  # its tests' server on SQLite and on PostgreSQL (conftest.py)

AGENT = {"X-Xpupool-Agent-Protocol": "2"}


def _agent_token(server: Server, **body: object) -> dict[str, object]:
    r = server.client.post("/v1/tokens", json={"role": "agent", **body}, headers=server.admin)
    assert r.status_code == 201, r.text
    return dict(r.json())


@pytest.mark.slow
def test_the_in_process_agent_speaks_for_its_own_nodes_only(server: Server) -> None:
    node(server, "remote-1", count=1)
    transport = PlaneTransport(server.plane, in_process_principal(["local-1"]))
    transport.register(NodeIn.model_validate(node_body("local-1", count=1)))
    assert transport.heartbeat(Heartbeat(node="local-1")).heartbeat_s == 5.0
    with pytest.raises(Forbidden, match="local-1"):
        transport.heartbeat(Heartbeat(node="remote-1"))
    with pytest.raises(Forbidden, match="local-1"):
        transport.register(NodeIn.model_validate(node_body("remote-1", count=2)))
    with pytest.raises(Forbidden):
        transport.append_log("remote-1", 1, 0, b"forged", 0, 1)
    refused = [e for e in server.plane.audit.entries(None, 100) if e.status == 403]
    assert {e.action for e in refused} == {"heartbeat", "register", "append_log"}
    assert all(e.token_id == 0 and e.node == "local-1" for e in refused)
    assert len(server.client.get("/v1/devices?node=remote-1", headers=server.admin).json()) == 1


@pytest.mark.slow
def test_a_refused_bootstrap_exchange_spends_nothing_and_issues_nothing(server: Server) -> None:
    boot = _agent_token(server, bootstrap=True)
    before = server.client.get("/v1/tokens", headers=server.admin).json()
    # the registration itself is refused (a duplicate UUID is 422): the token is not spent
    bad = node_body("new-1", count=2)
    bad["devices"][1]["uuid"] = bad["devices"][0]["uuid"]
    headers = {**server.as_(str(boot["token"])), **AGENT}
    r = server.client.post("/v1/agent/register", json=bad, headers=headers)
    assert r.status_code == 422, r.text
    assert server.client.get("/v1/tokens", headers=server.admin).json() == before
    r = server.client.post("/v1/agent/register", json=node_body("new-1", 1), headers=headers)
    assert r.status_code == 200 and r.json()["token"], r.text
    after = {t["id"]: t for t in server.client.get("/v1/tokens", headers=server.admin).json()}
    assert after[boot["id"]]["revoked"] and after[boot["id"]]["node"] == "new-1"
    assert [t["node"] for t in after.values() if t["id"] not in {b["id"] for b in before}] == [
        "new-1"
    ]
    exchanges = [
        e for e in server.plane.audit.entries(None, 100) if e.action == "bootstrap_exchange"
    ]
    assert len(exchanges) == 1 and "new-1" in exchanges[0].result


def test_a_pinned_bootstrap_token_registers_its_name_only(server: Server) -> None:
    boot = _agent_token(server, bootstrap=True, node="pinned-1")
    headers = {**server.as_(str(boot["token"])), **AGENT}
    r = server.client.post("/v1/agent/register", json=node_body("other-1", 1), headers=headers)
    assert r.status_code == 403 and "pinned-1" in r.json()["reason"]
    r = server.client.post("/v1/agent/register", json=node_body("pinned-1", 1), headers=headers)
    assert r.status_code == 200, r.text


def test_expiry_follows_the_plane_clock(server: Server) -> None:
    issued = _agent_token(server, node="n1", expires_in_s=60)
    headers = {**server.as_(str(issued["token"])), **AGENT}
    r = server.client.post("/v1/agent/register", json=node_body("n1", 1), headers=headers)
    assert r.status_code == 200, r.text
    server.clock.advance(61)  # past it, while the principal is cached
    r = server.client.post("/v1/agent/heartbeat", json={"node": "n1"}, headers=headers)
    assert r.status_code == 401 and "expired" in r.json()["reason"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"role": "tenant"}, "role"),
        ({"role": "agent", "node": "Bad Name"}, "node"),
        ({"role": "agent", "expires_in_s": 0}, "expires_in_s"),
        ({"role": "agent", "expires_in_s": 5, "expires_at": 2e9}, "body"),
    ],
)
def test_bad_token_requests_are_422(server: Server, body: dict[str, object], field: str) -> None:
    r = server.client.post("/v1/tokens", json=body, headers=server.admin)
    assert r.status_code == 422 and r.json()["field"] == field, r.text


def test_tenant_tokens_cannot_be_bound_to_nodes() -> None:
    with pytest.raises(ValueError, match="agent"):
        TokenIn(role="tenant", node="n1")
    with pytest.raises(ValueError, match="agent"):
        TokenIn(role="tenant", bootstrap=True)


def test_an_unbound_token_binds_once_and_the_binding_is_stored(server: Server) -> None:
    r = server.client.post("/v1/tenants", json={"name": "t"}, headers=server.admin)
    assert r.status_code == 201
    token = server.client.post(
        "/v1/tenants/t/tokens", json={"role": "agent"}, headers=server.admin
    ).json()["token"]
    who = tenants.authenticate(server.plane, token)
    assert who is not None and who.nodes is None
    node_identity.register(server.plane, who, NodeIn.model_validate(node_body("a-1", 1)))
    with pytest.raises(Forbidden, match="a-1"):  # the stale principal is re-read, not trusted
        node_identity.register(server.plane, who, NodeIn.model_validate(node_body("b-1", 1)))
    bound = tenants.authenticate(server.plane, token)
    assert bound is not None and bound.nodes == frozenset({"a-1"})
    binds = [e for e in server.plane.audit.entries(None, 100) if e.action == "bind_token"]
    assert len(binds) == 1 and binds[0].node == "a-1"


def test_metrics_for_another_nodes_device_are_422(server: Server) -> None:
    node(server, "n1", count=1)
    node(server, "n2", count=1)
    body = {"node": "n1", "metrics": [{"uuid": "n2-gpu0", "memory_used_mib": 5}]}
    r = server.client.post("/v1/agent/heartbeat", json=body, headers=server.admin)
    assert r.status_code == 422 and r.json()["field"] == "metrics[0].uuid"
    assert server.plane.device_metrics("n2-gpu0") is None


def test_which_requests_make_an_audit_row() -> None:
    admin = Principal(1, "admin", None)
    agent = Principal(2, "agent", None, frozenset({"n1"}))
    tenant = Principal(3, "tenant", "t")
    assert audited(admin, "create_tenant", "POST", 201)
    assert audited(admin, "create_tenant", "POST", 409)
    assert not audited(admin, "list_tenants", "GET", 200)
    assert not audited(admin, "heartbeat", "POST", 200)  # counted instead
    assert audited(agent, "register", "POST", 200)
    assert not audited(agent, "heartbeat", "POST", 200)
    assert not audited(agent, "append_log", "POST", 204)
    assert audited(agent, "heartbeat", "POST", 403)
    assert audited(agent, "list_jobs", "GET", 403)
    assert not audited(tenant, "submit", "POST", 201)
    assert not audited(None, "heartbeat", "POST", 401)


@pytest.mark.slow
def test_the_audit_log_keeps_the_newest_rows(server: Server) -> None:
    log = server.plane.audit
    log.keep = AuditKeep(admin=10)
    who = Principal(1, "admin", None)
    for i in range(1200):
        log.record(who, "test", f"row {i}", 200, "ok")
    rows = log.entries(None, 10_000)
    assert len(rows) == 10  # pruned at every tenth of `keep` to the newest `keep`
    assert rows[-1].target == "row 1199"
    assert log.entries(None, 3)[0].target == "row 1197"


def test_ignored_reports_are_recorded_once(server: Server) -> None:
    node(server, "n1", count=1)
    body = {"node": "n1", "replicas": [{"job_id": 99, "replica": 0, "state": "running"}]}
    for _ in range(3):
        r = server.client.post("/v1/agent/heartbeat", json=body, headers=server.admin)
        assert r.status_code == 200 and r.json()["stop"] == [[99, 0]]
    ignored = [e for e in server.plane.audit.entries(None, 100) if e.action == "report_ignored"]
    assert len(ignored) == 1 and "job 99" in ignored[0].result


@pytest.mark.parametrize(
    ("headers", "said"),
    [
        ({}, "agent protocol 1 (no X-Xpupool-Agent-Protocol header)"),
        ({"X-Xpupool-Agent-Protocol": "3"}, "agent protocol 3"),
    ],
)
@pytest.mark.slow
def test_another_protocol_is_426_naming_both(
    server: Server, headers: dict[str, str], said: str
) -> None:
    issued = _agent_token(server, node="n1")
    r = server.client.post(
        "/v1/agent/register",
        json=node_body("n1", 1),
        headers={**server.as_(str(issued["token"])), **headers},
    )
    assert r.status_code == 426 and said in r.json()["reason"], r.text
    assert "this server speaks agent protocol 2" in r.json()["reason"]
    assert r.headers["X-Xpupool-Agent-Protocol"] == "2"
    assert server.client.get("/v1/nodes/n1", headers=server.admin).status_code == 404


def test_admin_rows_name_what_was_acted_on_not_the_route(server: Server) -> None:
    """Issue 43: an admin's 'create_tenant' row said 'POST /v1/tenants', not which tenant."""
    node(server, "n1", count=1)
    admin = server.admin
    assert server.client.post("/v1/tenants", json={"name": "vision"}, headers=admin).is_success
    r = server.client.post("/v1/tenants", json={"name": "vision"}, headers=admin)
    assert r.status_code == 409  # refused: the row still names the tenant
    token = server.client.post(
        "/v1/tenants/vision/tokens", json={"role": "tenant"}, headers=admin
    ).json()
    agent = server.client.post("/v1/tokens", json={"role": "agent", "node": "n9"}, headers=admin)
    body = {"command": ["true"], "spec": "A100:1", "tenant": "vision"}
    job = server.client.post("/v1/jobs", json=body, headers=admin).json()
    rows = [(e.action, e.target, e.status) for e in server.plane.audit.entries(None, 100)]
    assert ("create_tenant", "tenant vision", 201) in rows, rows
    assert ("create_tenant", "tenant vision", 409) in rows, rows
    assert ("issue_token", f"tenant token {token['id']} of tenant vision", 201) in rows, rows
    said = f"agent token {agent.json()['id']} for node n9"
    assert ("issue_agent_token", said, 201) in rows, rows
    assert ("submit", f"job {job['id']} of tenant vision", 201) in rows, rows
