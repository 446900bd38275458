"""The admin's grants in process (``services/grants.py``): a lowered cap lowers what waits, and
a tenant's new weight reaches its queues. The HTTP answers are in
tests/integration/test_admin_grants.py."""

from __future__ import annotations

import pytest
from server_kit import Server, job, queue, submit, tenant


@pytest.mark.slow
def test_a_lowered_cap_lowers_the_jobs_that_wait(server: Server) -> None:
    lab = tenant(server, "lab")
    queue(server, "lab", "lab", [], max_priority=10)
    waiting = submit(server, lab, "cpu=100000", priority=10)  # no node: it waits
    queue(server, "lab", "lab", [], max_priority=3)
    got = job(server, waiting["id"])
    assert got["priority"] == 3
    assert "lowered to its queue's max_priority 3" in got["events"][-1]["reason"]
    assert server.plane.queued[waiting["id"]].request.priority == 3
    r = server.client.post(
        "/v1/jobs", json={"command": ["x"], "priority": 4}, headers=server.as_(lab)
    )
    assert r.status_code == 403 and r.json()["field"] == "priority"


@pytest.mark.slow
def test_a_new_weight_reaches_the_tenants_queues(server: Server) -> None:
    tenant(server, "lab")
    queue(server, "lab-big", "lab", [])
    r = server.client.patch("/v1/tenants/lab", json={"weight": 4}, headers=server.admin)
    assert r.status_code == 200 and r.json()["weight"] == 4
    assert {server.plane.queue_specs[q].weight for q in ("lab", "lab-big")} == {4}


def post(server: Server, token: str, **body: object) -> int:
    r = server.client.post("/v1/jobs", json={"command": ["x"], **body}, headers=server.as_(token))
    return r.status_code


@pytest.mark.slow
def test_limits_are_read_once_and_every_change_applies_to_the_next_submission(
    server: Server,
) -> None:
    """The limits a submission is checked against are kept per queue between submissions
    (issue 25); each change the admin makes applies to the very next one."""
    lab = tenant(server, "lab")
    assert post(server, lab, spec="cpu=100000") == 201  # no node: it waits; limits now kept
    assert server.plane.grant_row("lab") is not None
    r = server.client.patch("/v1/tenants/lab", json={"max_pending_jobs": 1}, headers=server.admin)
    assert r.status_code == 200
    assert post(server, lab, spec="cpu=100000") == 429  # one waits already
    r = server.client.patch("/v1/tenants/lab", json={"max_pending_jobs": 5}, headers=server.admin)
    assert post(server, lab, spec="cpu=100000") == 201
    assert post(server, lab, priority=2) == 403  # the queue's cap is 0
    queue(server, "lab", "lab", [], max_priority=2)
    assert post(server, lab, priority=2) == 201
    queue(server, "lab", "lab", [], max_priority=1)
    assert post(server, lab, priority=2) == 403
    other = tenant(server, "other")  # a new tenant's own limits, not another's
    r = server.client.patch(
        "/v1/tenants/other", json={"max_replicas_per_job": 1}, headers=server.admin
    )
    assert post(server, other, spec="cpu=1 replicas=2") == 403
    assert post(server, lab, spec="cpu=1 replicas=2") == 201
