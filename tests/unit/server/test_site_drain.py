"""Draining a site for maintenance (issue 51, part 3): no new work goes there (its nodes are
cordoned, so even a job naming it waits), a pending job dispatched there is dispatched again,
a running job is left to finish or moved by its ``on_site_lost``, and undraining puts it back."""

from __future__ import annotations

import pytest
from server_kit import BOTH_STORES, Server, heartbeat, job, reopen, report, submit, tenant
from test_plane_site_choice import reasons, site_node, two_sites
from test_site_outage import run

STORES = BOTH_STORES  # the drain's marks are stored: SQLite and PostgreSQL alike


@pytest.mark.slow
def test_a_drained_site_takes_no_new_work_and_moves_what_may_move(server: Server) -> None:
    two_sites(server)
    a = tenant(server, "a")
    stays = submit(server, a, "A100:2 site=near")["id"]
    moves = submit(server, a, "A100:2 data=imagenet", on_site_lost="requeue")["id"]
    server.schedule()
    assert job(server, moves)["site"] == "near"
    run(server, "n-0", stays)
    heartbeat(server, "n-0", [report(stays, 0, "running"), report(moves, 0, "running")])
    assert job(server, moves)["state"] == "running"

    r = server.client.post("/v1/sites/near/drain", headers=server.as_(a))
    assert r.status_code == 403, r.text  # the admin's
    r = server.client.post("/v1/sites/near/drain", headers=server.admin)
    assert r.status_code == 200, r.text
    assert r.json()["name"] == "near" and r.json()["drained"] is True
    assert server.client.post("/v1/sites/nowhere/drain", headers=server.admin).status_code == 404
    node = server.client.get("/v1/nodes/n-0", headers=server.admin).json()
    assert node["schedulable"] is False
    assert job(server, stays)["stop_cause"] is None  # left to finish
    moving = job(server, moves)
    assert moving["stop_cause"] == "preempted"
    assert any("site near drained: moved" in x for x in reasons(moving))
    heartbeat(server, "n-0", [report(stays, 0, "running"), report(moves, 0, "stopped", 143)])
    server.schedule()
    moved = job(server, moves)
    assert [x["node"] for x in moved["assignments"]] == ["f-0"]  # near takes no new work
    assert any(
        x.startswith("site near takes no new work (drained or unreachable)") for x in reasons(moved)
    )
    named = submit(server, a, "A100 site=near")["id"]
    server.schedule()
    assert job(server, named)["state"] == "pending"

    r = server.client.post("/v1/sites/near/undrain", headers=server.admin)
    assert r.status_code == 200, r.text
    assert r.json()["drained"] is False
    server.schedule()
    assert job(server, named)["state"] == "scheduled"


@pytest.mark.slow
def test_undrain_leaves_a_node_the_admin_cordoned_on_its_own(server: Server) -> None:
    """The drain marks the nodes it cordoned; the undrain uncordons those only: a node the admin
    cordoned before the drain stays cordoned, and so does one uncordoned then cordoned again by
    the admin during it (the admin's word on it since). The marks are in the store: a restart
    between drain and undrain changes nothing."""
    two_sites(server)
    for name in ("n-1", "n-2"):
        site_node(server, name, "near", 4)
    admin = server.admin

    def schedulable(srv: Server, name: str) -> bool:
        got = srv.client.get(f"/v1/nodes/{name}", headers=admin).json()
        return bool(got["schedulable"])

    assert server.client.post("/v1/nodes/n-1/cordon", headers=admin).status_code == 200
    assert server.client.post("/v1/sites/near/drain", headers=admin).status_code == 200
    assert not any(schedulable(server, n) for n in ("n-0", "n-1", "n-2"))
    assert server.client.post("/v1/nodes/n-2/uncordon", headers=admin).status_code == 200
    assert server.client.post("/v1/nodes/n-2/cordon", headers=admin).status_code == 200
    again = reopen(server)
    try:
        with again.client:
            r = again.client.post("/v1/sites/near/undrain", headers=admin)
            assert r.status_code == 200, r.text
            assert [schedulable(again, n) for n in ("n-0", "n-1", "n-2")] == [True, False, False]
            assert r.json()["drained"] is False  # not every node of it is cordoned now
    finally:
        again.plane.db.dispose()
