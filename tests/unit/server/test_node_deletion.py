"""Deleting a node (issue 18, item 1), in process: at once when nothing is held there, 409 naming
each allocation and job otherwise (nothing changes), or a drain that removes the node when its
last allocation ends; the agent tokens bound to it are revoked; only the admin may; a refused or
failed deletion leaves the store, the records and the very engine object as they were. The admin
taking over a cluster-file node makes it an agent node that the in-process agent lets go of."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from server_kit import (
    BOTH_STORES,
    Server,
    devices,
    heartbeat,
    job,
    node,
    node_body,
    reopen,
    report,
    row_counts,
    submit,
    tenant,
)
from sqlalchemy import select
from sqlalchemy.exc import OperationalError

from xpupool.model.device import Device, Node
from xpupool.model.errors import Forbidden
from xpupool.server.inprocess_agent import local_agent
from xpupool.server.schemas.agent_protocol import AGENT_PROTOCOL, AGENT_PROTOCOL_HEADER, Heartbeat
from xpupool.server.schemas.nodes import NodeDeletion
from xpupool.server.services import fleet, node_identity
from xpupool.server.services.agents import mark_lost_nodes
from xpupool.server.storage.fleet import nodes as t_nodes

STORES = BOTH_STORES  # its tests' server on SQLite and on PostgreSQL (conftest.py)

PROTOCOL = {AGENT_PROTOCOL_HEADER: str(AGENT_PROTOCOL)}


def delete(srv: Server, name: str, token: str | None = None, drain: bool = False) -> Any:
    params = {"drain": "true"} if drain else {}
    return srv.client.delete(
        f"/v1/nodes/{name}", params=params, headers=srv.as_(token or srv.admin_token)
    )


def agent_token(srv: Server, name: str) -> str:
    """A token bound to node ``name``, which it then registers."""
    r = srv.client.post("/v1/tokens", json={"role": "agent", "node": name}, headers=srv.admin)
    assert r.status_code == 201, r.text
    token = str(r.json()["token"])
    r = srv.client.post(
        "/v1/agent/register", json=node_body(name, count=2), headers={**srv.as_(token), **PROTOCOL}
    )
    assert r.status_code == 200, r.text
    return token


def agent_heartbeat(srv: Server, token: str, name: str) -> int:
    r = srv.client.post(
        "/v1/agent/heartbeat", json={"node": name}, headers={**srv.as_(token), **PROTOCOL}
    )
    return int(r.status_code)


def snapshot(srv: Server) -> tuple[object, ...]:
    """What a refused or failed deletion must leave as it was."""
    plane = srv.plane
    nodes = {
        n: (r.node, r.target, r.cordoned, set(r.cordoned_devices), r.deleting_since)
        for n, r in plane.node_records.items()
    }
    return row_counts(srv), plane.engine, plane.capacity_gen, nodes, devices(srv)


@pytest.mark.slow
def test_an_idle_node_is_deleted_with_its_tokens(server: Server) -> None:
    token = agent_token(server, "n1")
    node(server, "n2", count=1)
    r = delete(server, "n1")
    assert r.status_code == 200, r.text
    body = NodeDeletion.model_validate(r.json())
    assert body.deleted and body.waiting_for == [] and len(body.tokens_revoked) == 1
    assert "token issue --agent --node n1" in body.note
    assert [n["name"] for n in server.client.get("/v1/nodes", headers=server.admin).json()] == [
        "n2"
    ]
    assert all(d["node"] == "n2" for d in devices(server))
    assert "n1" not in server.plane.engine.state.node_index
    with server.plane.db.connect() as conn:
        assert conn.execute(select(t_nodes.c.name)).scalars().all() == ["n2"]
    assert agent_heartbeat(server, token, "n1") == 401
    tokens = server.client.get("/v1/tokens", headers=server.admin).json()
    assert [t["revoked"] for t in tokens if t["node"] == "n1"] == [True]
    assert delete(server, "n1").status_code == 404


@pytest.mark.slow
def test_live_allocations_are_409_naming_them_and_nothing_changes(server: Server) -> None:
    token = agent_token(server, "n1")
    a = tenant(server, "a")
    j = submit(server, a, "A100:1")
    server.schedule()
    before = snapshot(server)
    r = delete(server, "n1")
    assert r.status_code == 409, r.text
    alloc = server.plane.held_jobs[j["id"]].allocations[0].id
    assert f"allocation {alloc} (job {j['id']})" in r.json()["reason"]
    assert "--drain" in r.json()["reason"]
    assert snapshot(server) == before
    assert agent_heartbeat(server, token, "n1") == 200


@pytest.mark.slow
def test_a_drain_deletes_the_node_when_its_last_allocation_ends(server: Server) -> None:
    token = agent_token(server, "n1")
    a = tenant(server, "a")
    first = submit(server, a, "A100:2")
    server.schedule()
    assert job(server, first["id"])["assignments"][0]["node"] == "n1"
    node(server, "n2", count=2)
    r = delete(server, "n1", drain=True)
    assert r.status_code == 200, r.text
    body = NodeDeletion.model_validate(r.json())
    assert not body.deleted and body.tokens_revoked == []
    assert body.waiting_for == [
        f"allocation {server.plane.held_jobs[first['id']].allocations[0].id} (job {first['id']})"
    ]
    view = server.client.get("/v1/nodes/n1", headers=server.admin).json()
    assert view["deleting"] and not view["schedulable"]
    again = delete(server, "n1", drain=True)  # asked twice: the same drain
    assert again.status_code == 200 and again.json()["waiting_for"] == body.waiting_for
    other, third = submit(server, a, "A100:2"), submit(server, a, "A100:2")
    server.schedule()
    assert job(server, other["id"])["assignments"][0]["node"] == "n2"
    assert job(server, third["id"])["state"] == "pending"  # nothing new lands on n1
    heartbeat(server, "n1", [report(first["id"], 0, "running")])
    assert agent_heartbeat(server, token, "n1") == 200  # its agent still reports its work
    heartbeat(server, "n1", [report(first["id"], 0, "succeeded", 0)])
    assert server.client.get("/v1/nodes/n1", headers=server.admin).status_code == 404
    assert "n1" not in server.plane.engine.state.node_index
    assert agent_heartbeat(server, token, "n1") == 401
    rows = server.client.get("/v1/audit", headers=server.admin).json()
    removed = [row for row in rows if row["action"] == "delete_node" and row["role"] == "none"]
    assert removed and "node n1" in removed[0]["target"] and "drained" in removed[0]["result"]


@pytest.mark.slow
def test_a_drain_survives_a_restart_and_uncordon_cancels_it(server: Server) -> None:
    node(server, "n1", count=2)
    a = tenant(server, "a")
    j = submit(server, a, "A100:1")
    server.schedule()
    assert delete(server, "n1", drain=True).status_code == 200
    again = reopen(server)
    with again.client:
        assert again.client.get("/v1/nodes/n1", headers=again.admin).json()["deleting"]
        r = again.client.post("/v1/nodes/n1/uncordon", headers=again.admin)
        assert r.status_code == 200 and not r.json()["deleting"] and r.json()["schedulable"]
        heartbeat(again, "n1", [report(j["id"], 0, "succeeded", 0)])
        assert again.client.get("/v1/nodes/n1", headers=again.admin).status_code == 200
    again.plane.db.dispose()


@pytest.mark.slow
def test_only_the_admin_deletes(server: Server) -> None:
    token = agent_token(server, "n1")
    user = tenant(server, "a")
    before = snapshot(server)
    assert delete(server, "n1", token=user).status_code == 403
    assert delete(server, "n1", token=token).status_code == 403
    assert snapshot(server) == before
    rows = server.client.get("/v1/audit", headers=server.admin).json()
    refused = [row for row in rows if row["action"] == "delete_node"]
    assert [row["status"] for row in refused] == [403] and refused[0]["role"] == "agent"
    assert delete(server, "n1").status_code == 200
    rows = server.client.get("/v1/audit", headers=server.admin).json()
    done = [row for row in rows if row["action"] == "delete_node" and row["status"] == 200]
    assert done and done[0]["role"] == "admin" and "n1" in done[0]["target"]


@pytest.mark.slow
def test_a_failed_write_changes_nothing(server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    token = agent_token(server, "n1")
    before = snapshot(server)
    engine = server.plane.engine
    real = server.plane.remove_node

    def fails(conn: Any, name: str, event: Any) -> list[int]:
        real(conn, name, event)  # the row and the tokens go in the transaction, then the disk fails
        raise OperationalError("DELETE", {}, Exception("disk I/O error"))

    monkeypatch.setattr(server.plane, "remove_node", fails)
    r = delete(server, "n1")
    assert r.status_code == 503, r.text
    assert "n1" in server.plane.node_records and "n1" in server.plane.engine.state.node_index
    assert not server.plane.is_released("n1")
    with server.plane.db.connect() as conn:
        assert conn.execute(select(t_nodes.c.name)).scalars().all() == ["n1"]
    monkeypatch.undo()
    assert server.plane.check_store()
    assert snapshot(server)[3] == before[3] and server.plane.engine is not engine  # reloaded
    assert agent_heartbeat(server, token, "n1") == 200


def cluster_node(name: str) -> Node:
    return Node(
        name=name,
        cpu_milli=16_000,
        memory_mib=65_536,
        devices=(Device(uuid=f"{name}-0", vendor="nvidia", model="NVIDIA L20", memory_mib=49_152),),
    )


@pytest.mark.slow
def test_the_admin_takes_over_a_cluster_file_node(server: Server) -> None:
    fleet.register_many(server.plane, [cluster_node("sim-1"), cluster_node("sim-2")], "cluster")
    hosted = node_identity.in_process_principal(["sim-1", "sim-2"])
    node_identity.heartbeat(server.plane, hosted, Heartbeat(node="sim-1"))
    bound = server.client.post(
        "/v1/tokens", json={"role": "agent", "node": "sim-1"}, headers=server.admin
    ).json()["token"]
    body = node_body("sim-1", count=1, model="NVIDIA L20", memory_mib=49_152)
    refused = server.client.post(
        "/v1/agent/register", json=body, headers={**server.as_(bound), **PROTOCOL}
    )
    assert refused.status_code == 403 and "cluster file" in refused.json()["reason"]
    r = server.client.post("/v1/agent/register", json=body, headers=server.admin)
    assert r.status_code == 200, r.text
    assert r.json()["source"] == "agent"
    # the in-process agent lets go of it; its other node stays its own
    with pytest.raises(Forbidden, match="taken over"):
        node_identity.heartbeat(server.plane, hosted, Heartbeat(node="sim-1"))
    node_identity.heartbeat(server.plane, hosted, Heartbeat(node="sim-2"))
    # from now on the node's own credential speaks for it, and silence makes it lost
    assert agent_heartbeat(server, bound, "sim-1") == 200
    server.clock.advance(31)
    assert mark_lost_nodes(server.plane) == ["sim-1"]
    # a start with the same cluster file leaves the agent node as it is
    fleet.register_many(server.plane, [cluster_node("sim-1"), cluster_node("sim-2")], "cluster")
    assert server.plane.node_records["sim-1"].source == "agent"
    assert [d.uuid for d in server.plane.node_records["sim-1"].node.devices] == ["sim-1-gpu0"]


@pytest.mark.slow
def test_a_deleted_cluster_file_node_comes_back_from_the_file(server: Server) -> None:
    fleet.register_many(server.plane, [cluster_node("sim-1"), cluster_node("sim-2")], "cluster")
    r = delete(server, "sim-1")
    assert r.status_code == 200, r.text
    assert "cluster file" in r.json()["note"] and "registers it again" in r.json()["note"]
    hosted = node_identity.in_process_principal(["sim-1", "sim-2"])
    with pytest.raises(Forbidden, match="deleted"):
        node_identity.heartbeat(server.plane, hosted, Heartbeat(node="sim-1"))
    fleet.register_many(server.plane, [cluster_node("sim-1"), cluster_node("sim-2")], "cluster")
    assert server.plane.node_records["sim-1"].source == "cluster"
    assert sorted(server.plane.engine.state.node_index) == ["sim-1", "sim-2"]


@pytest.mark.slow
def test_the_in_process_agent_lets_go_of_a_deleted_node(server: Server, tmp_path: Path) -> None:
    fleet.register_many(server.plane, [cluster_node("sim-1"), cluster_node("sim-2")], "cluster")
    agent = local_agent(server.plane, tmp_path / "agent", probes=[], host="host-1")
    agent.tick()
    assert [n.name for n in agent.nodes] == ["host-1", "sim-1", "sim-2"]
    assert server.plane.node_records["sim-1"].last_heartbeat is not None
    assert delete(server, "sim-1").status_code == 200
    assert delete(server, "host-1").status_code == 200  # its own host too, until the next start
    server.clock.advance(1)
    for hosted in agent.nodes:
        hosted.next_heartbeat = 0.0
    agent.next_idle_heartbeat = 0.0  # the simulated nodes' period is up too
    agent.tick()
    assert [n.name for n in agent.nodes] == ["sim-2"]
    assert server.plane.node_records["sim-2"].last_heartbeat == server.clock()
    assert sorted(server.plane.node_records) == ["sim-2"]  # the local host did not register again
    rows = server.client.get("/v1/audit", headers=server.admin).json()
    assert [r for r in rows if r["status"] == 403] == []  # the admin's doing, not a refusal


@pytest.mark.slow
def test_the_lost_node_watch_walks_agent_nodes_only(server: Server) -> None:
    """``heard_node_records`` (what ``mark_lost_nodes`` walks) follows registrations, takeovers
    and deletions, and leaves the cluster file's nodes out however many there are."""
    plane = server.plane
    fleet.register_many(plane, [cluster_node(f"sim-{i}") for i in range(50)], "cluster")
    node(server, "a1")
    assert [name for name, _ in plane.heard_node_records()] == ["a1"]
    body = node_body("sim-1", count=1, model="NVIDIA L20", memory_mib=49_152)
    assert server.client.post("/v1/agent/register", json=body, headers=server.admin).is_success
    assert sorted(name for name, _ in plane.heard_node_records()) == ["a1", "sim-1"]
    assert delete(server, "a1").status_code == 200
    assert [name for name, _ in plane.heard_node_records()] == ["sim-1"]
    server.clock.advance(plane.lost_after_s + 1)
    assert mark_lost_nodes(plane) == ["sim-1"]
