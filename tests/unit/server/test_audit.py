"""The audit log's kinds and bounds (issue 43, item 8): an agent credential's refused requests
are aggregated, one row per credential, source, action and status a window with their count,
written at most once per ``flush_s``; each kind is pruned among its own rows, so a flood of
refusals never evicts the admin's history; a store from before kinds gets them at start."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from server_kit import BOTH_STORES, Server, node, node_body

from xpupool.server.audit import AuditKeep
from xpupool.server.schemas.audit import AuditKind
from xpupool.server.storage.meta import connect

STORES = BOTH_STORES  # its tests' server on SQLite and on PostgreSQL (conftest.py)

AGENT = {"X-Xpupool-Agent-Protocol": "2"}


def _node_token(server: Server, name: str) -> dict[str, str]:
    r = server.client.post("/v1/tokens", json={"role": "agent", "node": name}, headers=server.admin)
    assert r.status_code == 201, r.text
    return {**server.as_(r.json()["token"]), **AGENT}


def _rows(server: Server, **params: Any) -> list[dict[str, Any]]:
    r = server.client.get("/v1/audit", params={"limit": 10_000, **params}, headers=server.admin)
    assert r.status_code == 200, r.text
    return list(r.json())


@pytest.mark.slow
def test_a_flood_of_refusals_is_counted_and_never_evicts_the_admins_history(
    server: Server,
) -> None:
    node(server, "n1", count=1)
    node(server, "n2", count=1)
    server.plane.audit.keep = AuditKeep(admin=10, agent=10, refused=2)
    r = server.client.post("/v1/tenants", json={"name": "vision"}, headers=server.admin)
    assert r.status_code == 201, r.text
    hostile = _node_token(server, "n1")
    for _window in range(4):  # four windows of refusals: more refused rows than the cap of 2
        for _ in range(150):
            r = server.client.post("/v1/agent/heartbeat", json={"node": "n2"}, headers=hostile)
            assert r.status_code == 403, r.text
        assert server.client.get("/v1/jobs", headers=hostile).status_code == 403
        server.clock.advance(61)
    rows = _rows(server)
    refused = [r for r in rows if r["kind"] == "refused"]
    assert len(refused) == 2  # the newest two of 8 (two actions a window, four windows)
    assert {r["action"]: r["count"] for r in refused} == {"heartbeat": 150, "list_jobs": 1}
    beat = next(r for r in refused if r["action"] == "heartbeat")
    assert beat["status"] == 403 and beat["node"] == "n1" and "n2" in beat["result"]
    assert beat["first_at"] <= beat["at"] and beat["source"] == "testclient"
    admin = [(r["action"], r["target"]) for r in rows if r["kind"] == "admin"]
    assert ("create_tenant", "tenant vision") in admin, admin
    assert [r["action"] for r in _rows(server, kind="admin")] == [a for a, _ in admin]


@pytest.mark.slow
def test_refusals_are_written_once_a_window_until_read(server: Server) -> None:
    """With the clock standing still, 300 refusals are one INSERT and no UPDATE; a read of the
    log writes their count first (one UPDATE), and it is exact."""
    node(server, "n1", count=1)
    hostile = _node_token(server, "n1")
    statements: list[str] = []

    def seen(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if "audit" in statement and not statement.lstrip().upper().startswith("SELECT"):
            statements.append(statement.split()[0].upper())

    sa.event.listen(server.plane.db, "before_cursor_execute", seen)
    try:
        for _ in range(300):
            r = server.client.post("/v1/agent/heartbeat", json={"node": "n9"}, headers=hostile)
            assert r.status_code == 403
        assert statements == ["INSERT"]
        refused = _rows(server, kind="refused")
        assert statements == ["INSERT", "UPDATE"]
    finally:
        sa.event.remove(server.plane.db, "before_cursor_execute", seen)
    assert [(r["action"], r["count"]) for r in refused] == [("heartbeat", 300)]


@pytest.mark.slow
def test_invented_reports_are_aggregated_with_the_refusals(server: Server) -> None:
    node(server, "n1", count=1)
    hostile = _node_token(server, "n1")
    replicas = [{"job_id": 1000 + i, "replica": 0, "state": "running"} for i in range(200)]
    body = {"node": "n1", "replicas": replicas}
    r = server.client.post("/v1/agent/heartbeat", json=body, headers=hostile)
    assert r.status_code == 200, r.text
    ignored = [r for r in _rows(server) if r["action"] == "report_ignored"]
    assert [(r["kind"], r["count"]) for r in ignored] == [("refused", 200)]


@pytest.mark.slow
def test_a_refused_rows_pruned_run_is_written_again(server: Server) -> None:
    """A run whose row the refused cap pruned while the run went on gets its row back, with
    every refusal counted."""
    node(server, "n1", count=1)
    server.plane.audit.keep = AuditKeep(refused=1)
    hostile = _node_token(server, "n1")
    beat = {"node": "n2"}
    assert server.client.post("/v1/agent/heartbeat", json=beat, headers=hostile).status_code == 403
    assert server.client.get("/v1/jobs", headers=hostile).status_code == 403  # prunes the first
    server.clock.advance(2)
    for _ in range(4):
        r = server.client.post("/v1/agent/heartbeat", json=beat, headers=hostile)
        assert r.status_code == 403
    counts = {r["action"]: r["count"] for r in _rows(server, kind="refused")}
    assert counts == {"heartbeat": 5}


def test_a_store_from_before_kinds_gets_them_at_start(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    old = sa.create_engine(url)
    with old.begin() as conn:
        conn.exec_driver_sql(
            "CREATE TABLE audit (id INTEGER PRIMARY KEY, at FLOAT NOT NULL, token_id INTEGER, "
            "role VARCHAR(10) NOT NULL, tenant VARCHAR(63), node VARCHAR(200), "
            "action VARCHAR(63) NOT NULL, target VARCHAR(300) NOT NULL, status INTEGER NOT NULL, "
            "result VARCHAR(500) NOT NULL)"
        )
        rows = [
            (1, "admin", "create_tenant", 201),
            (2, "agent", "register", 200),
            (3, "agent", "heartbeat", 403),
            (4, "bootstrap", "register", 403),
            (5, "agent", "report_ignored", 200),
            (6, "none", "delete_node", 200),
        ]
        for i, role, action, status in rows:
            conn.exec_driver_sql(
                "INSERT INTO audit VALUES (?, ?, 1, ?, NULL, NULL, ?, 'x', ?, 'ok')",
                (i, float(i), role, action, status),
            )
    old.dispose()
    engine = connect(url)
    with engine.connect() as conn:
        got = conn.execute(sa.text("SELECT id, kind, count FROM audit ORDER BY id")).all()
    indexes = {i["name"] for i in sa.inspect(engine).get_indexes("audit")}
    engine.dispose()
    kinds = [AuditKind.ADMIN, AuditKind.AGENT, *[AuditKind.REFUSED] * 3, AuditKind.ADMIN]
    assert got == [(i + 1, k.value, 1) for i, k in enumerate(kinds)]
    assert "audit_kind_id" in indexes


@pytest.mark.slow
def test_the_in_process_agents_refusals_are_aggregated_too(server: Server) -> None:
    from xpupool.model.errors import Forbidden
    from xpupool.server.inprocess_agent import PlaneTransport
    from xpupool.server.schemas.agent_protocol import Heartbeat, NodeIn
    from xpupool.server.services.node_identity import in_process_principal

    node(server, "remote-1", count=1)
    transport = PlaneTransport(server.plane, in_process_principal(["local-1"]))
    transport.register(NodeIn.model_validate(node_body("local-1", count=1)))
    for _ in range(20):
        with pytest.raises(Forbidden):
            transport.heartbeat(Heartbeat(node="remote-1"))
    refused = _rows(server, kind="refused")
    assert [(r["token_id"], r["action"], r["count"]) for r in refused] == [(0, "heartbeat", 20)]
