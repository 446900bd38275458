"""Registration is all or nothing (issue 18, item 3), in process: a refused registration leaves
the store's rows, the node records and the very engine object as they were; a drain is stored, and
applied when the allocations in its way end."""

from __future__ import annotations

from typing import Any

import pytest
from server_kit import (
    Server,
    devices,
    heartbeat,
    job,
    node,
    node_body,
    reopen,
    report,
    row_counts,
    tenant,
)

RUN = ["true"]


def submit(srv: Server, token: str, spec: str) -> dict[str, Any]:
    r = srv.client.post("/v1/jobs", json={"spec": spec, "command": RUN}, headers=srv.as_(token))
    assert r.status_code == 201, r.text
    return dict(r.json())


def register(srv: Server, body: dict[str, Any]) -> Any:
    return srv.client.post("/v1/agent/register", json=body, headers=srv.admin)


def unchanged(srv: Server) -> tuple[object, ...]:
    """What a refused registration must leave as it was."""
    plane = srv.plane
    nodes = {
        n: (r.node, getattr(r, "target", None), set(r.cordoned_devices))
        for n, r in plane.node_records.items()
    }
    return row_counts(srv), plane.engine, plane.capacity_gen, nodes, devices(srv)


@pytest.mark.slow
def test_shrinking_a_held_card_is_409_naming_the_job_and_changes_nothing(server: Server) -> None:
    node(server, "n1", count=2)
    a = tenant(server, "a")
    j = submit(server, a, "A100 mem=60Gi")
    server.schedule()
    before = unchanged(server)
    r = register(server, node_body("n1", count=2, memory_mib=40960))
    assert r.status_code == 409, r.text
    assert unchanged(server) == before
    assert f"(job {j['id']})" in r.json()["reason"] and "shrinks to 40960 MiB" in r.text
    held = job(server, j["id"])["assignments"][0]["devices"][0]["uuid"]
    gone = node_body("n1", count=2)
    gone["devices"] = [d for d in gone["devices"] if d["uuid"] != held]
    r = register(server, gone)
    assert r.status_code == 409 and f"device {held} is gone" in r.text
    assert unchanged(server) == before


@pytest.mark.slow
def test_a_uuid_of_another_node_is_422_and_changes_nothing(server: Server) -> None:
    node(server, "n1", count=2)
    before = unchanged(server)
    thief = node_body("n2", count=1)
    thief["devices"][0]["uuid"] = "n1-gpu1"
    r = register(server, thief)
    assert r.status_code == 422
    assert unchanged(server) == before
    assert r.json()["field"] == "devices[0].uuid" and "node n1" in r.json()["reason"]
    assert server.client.get("/v1/nodes", headers=server.admin).status_code == 200


@pytest.mark.slow
def test_a_drain_is_stored_and_applied_when_the_held_card_is_free(server: Server) -> None:
    node(server, "n1", count=2)
    a = tenant(server, "a")
    j = submit(server, a, "A100:1")
    server.schedule()
    held = job(server, j["id"])["assignments"][0]["devices"][0]["uuid"]
    smaller = node_body("n1", count=2)
    smaller["devices"] = [d for d in smaller["devices"] if d["uuid"] != held]
    r = register(server, {**smaller, "drain": True})
    assert r.status_code == 200, r.text
    assert r.json()["devices"] == 2  # served until the job ends
    card = next(d for d in devices(server, "n1") if d["uuid"] == held)
    assert card["draining"] and card["cordoned"]
    other = submit(server, a, "A100:2")
    server.schedule()
    assert job(server, other["id"])["state"] == "pending"  # the draining card takes nothing

    # a restart keeps the drain
    again = reopen(server)
    plane = again.plane
    with again.client:
        assert next(d for d in devices(again, "n1") if d["uuid"] == held)["draining"]
        heartbeat(again, "n1", [report(j["id"], 0, "running")])
        heartbeat(again, "n1", [report(j["id"], 0, "succeeded", 0)])
        assert [d["uuid"] for d in devices(again, "n1")] == [smaller["devices"][0]["uuid"]]
        assert plane.node_records["n1"].target is None
    plane.db.dispose()
