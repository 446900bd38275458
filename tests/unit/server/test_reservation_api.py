"""Reservations through the API on both stores (``/v1/reservations``): the admin makes and
deletes them, a tenant lists its own; a refusal names the field and stores nothing; the cards
are held across a restart, lent to a preemptible job before the window, reclaimed at its start
for the job booked into it, and a job still running in it is stopped at its end."""

from __future__ import annotations

from typing import Any

from server_kit import BOTH_STORES, Server, heartbeat, job, node, reopen, report, row_counts, tenant
from server_kit import submit as submit_job

from xpupool.server.services.reservations import WindowEdges

STORES = BOTH_STORES  # its tests' server on SQLite and on PostgreSQL (conftest.py)


def reserve(srv: Server, name: str = "r", **body: Any) -> Any:
    now = srv.clock()
    window = {"name": name, "tenant": "lab", "cards": "A100x2"}
    window |= {"start_at": now + 600, "end_at": now + 3600, **body}
    return srv.client.post("/v1/reservations", json=window, headers=srv.admin)


def cards(srv: Server, job_id: int) -> set[str]:
    return {d["uuid"] for a in job(srv, job_id)["assignments"] for d in a["devices"]}


def test_made_listed_deleted_and_refused_naming_the_field(server: Server) -> None:
    lab = tenant(server, "lab")
    other = tenant(server, "other")
    node(server, "n1", count=2)
    node(server, "n2", count=2)
    r = reserve(server)
    assert r.status_code == 201, r.text
    assert r.json()["phase"] == "ahead" and len(r.json()["devices"]) == 2
    before = row_counts(server)
    now = server.clock()
    refusals = [
        ({"start_at": now - 1}, "start_at"),
        ({"end_at": now + 600}, "end_at"),
        ({"end_at": now + 600 + 400 * 86_400}, "end_at"),
        ({"cards": "A100x4"}, "cards"),  # no node has four
        ({"cards": "8 cards"}, "cards"),
        ({"cards": "H100x1"}, "cards"),
        ({"tenant": "nobody"}, "tenant"),
    ]
    for body, field in refusals:
        refused = reserve(server, "x", **body)
        assert refused.status_code == 422, refused.text
        assert refused.json()["field"] == field, refused.text
    assert reserve(server).status_code == 409
    forbidden = server.client.post("/v1/reservations", json={}, headers=server.as_(lab))
    assert forbidden.status_code == 403
    assert row_counts(server) == before
    assert reserve(server, "later", start_at=now + 3600, end_at=now + 7200).status_code == 201
    assert reserve(server, "beside", cards="A100x2").status_code == 201  # the other node
    before = row_counts(server)
    full = reserve(server, "third", cards="A100x1", start_at=now + 3000)
    assert full.status_code == 422 and full.json()["field"] == "cards", full.text
    assert row_counts(server) == before
    mine = server.client.get("/v1/reservations", headers=server.as_(lab)).json()
    assert [x["name"] for x in mine] == ["beside", "later", "r"]
    assert server.client.get("/v1/reservations", headers=server.as_(other)).json() == []
    assert server.client.delete("/v1/reservations/later", headers=server.admin).status_code == 204
    assert server.client.delete("/v1/reservations/later", headers=server.admin).status_code == 404
    gone = server.client.delete("/v1/reservations/r", headers=server.as_(lab))
    assert gone.status_code == 403
    refused = server.client.post(
        "/v1/jobs", json={"command": ["true"], "reservation": "r"}, headers=server.as_(other)
    )
    assert refused.status_code == 422 and refused.json()["field"] == "reservation"


def test_lent_reclaimed_at_the_start_held_across_a_restart_and_ended(server: Server) -> None:
    lab = tenant(server, "lab")
    node(server, "n1", count=2)
    node(server, "n2", count=2)
    held = set(reserve(server).json()["devices"])
    edges = WindowEdges(server.plane)

    def submit(**body: Any) -> int:
        return int(submit_job(server, lab, "A100:2", **body)["id"])

    steady = submit()
    borrower = submit(preemptible=True)
    booked = submit(reservation="r")
    server.schedule()
    assert not cards(server, steady) & held  # not preemptible: kept off the reserved cards
    assert cards(server, borrower) == held
    lent = " ".join(e["reason"] for e in job(server, borrower)["events"])
    assert "lent until its window begins" in lent
    assert job(server, booked)["state"] == "pending"
    assert "reservation r begins" in job(server, booked)["reason"]
    node_of = {j: job(server, j)["assignments"][0]["node"] for j in (steady, borrower)}
    for j in (steady, borrower):
        heartbeat(server, node_of[j], [report(j, 0, "running")])

    restarted = reopen(server)
    with restarted.client:
        assert set(restarted.plane.reservations.cards("r")) == held
        edges = WindowEdges(restarted.plane)
        restarted.clock.advance(600)
        heartbeat(restarted, "n1", [report(j, 0, "running") for j in node_of if node_of[j] == "n1"])
        heartbeat(restarted, "n2", [report(j, 0, "running") for j in node_of if node_of[j] == "n2"])
        assert edges.check() == [borrower]
        why = job(restarted, borrower)["reason"]
        assert "reservation r begins" in why, why
        heartbeat(restarted, node_of[borrower], [report(borrower, 0, "stopped")])
        restarted.schedule()
        assert cards(restarted, booked) == held
        assert "in reservation r" in " ".join(e["reason"] for e in job(restarted, booked)["events"])
        heartbeat(restarted, node_of[borrower], [report(booked, 0, "running")])
        restarted.clock.advance(3000)
        assert edges.check() == [booked]
        assert job(restarted, steady)["state"] == "running"
    restarted.plane.db.dispose()
