"""The admin's grants in process (``services/grants.py``): a lowered cap lowers what waits, and
a tenant's new weight reaches its queues. The HTTP answers are in
tests/integration/test_admin_grants.py."""

from __future__ import annotations

from server_kit import Server, job, queue, submit, tenant


def test_a_lowered_cap_lowers_the_jobs_that_wait(server: Server) -> None:
    lab = tenant(server, "lab")
    queue(server, "lab", "lab", [], max_priority=10)
    waiting = submit(server, lab, "cpu=100000", priority=10)  # no node: it waits
    queue(server, "lab", "lab", [], max_priority=3)
    got = job(server, waiting["id"])
    assert got["priority"] == 3
    assert "lowered to its queue's max_priority 3" in got["events"][-1]["reason"]
    assert server.plane.pending[waiting["id"]].request.priority == 3
    r = server.client.post(
        "/v1/jobs", json={"command": ["x"], "priority": 4}, headers=server.as_(lab)
    )
    assert r.status_code == 403 and r.json()["field"] == "priority"


def test_a_new_weight_reaches_the_tenants_queues(server: Server) -> None:
    tenant(server, "lab")
    queue(server, "lab-big", "lab", [])
    r = server.client.patch("/v1/tenants/lab", json={"weight": 4}, headers=server.admin)
    assert r.status_code == 200 and r.json()["weight"] == 4
    assert {server.plane.queue_specs[q].weight for q in ("lab", "lab-big")} == {4}
