"""One pass retries at most ``RETRIES_PER_TENANT`` of a tenant's jobs that failed before, and
always tries new ones: one tenant's long queue does not set everyone's pace (issue 18)."""

from __future__ import annotations

import pytest
from server_kit import Server, job, node, queue, submit, tenant

from xpupool.server.scheduler_loop import RETRIES_PER_TENANT


def _tried_now(server: Server, tenant_name: str) -> int:
    plane = server.plane
    return sum(
        1
        for p in plane.queued.values()
        if p.tenant == tenant_name and p.tried == plane.capacity_gen
    )


@pytest.mark.slow
def test_retries_are_capped_per_tenant_and_rotate(server: Server) -> None:
    node(server, "n1")
    flood, other = tenant(server, "flood"), tenant(server, "other")
    queue(server, "flood", "flood", [], allow_unfittable=True)  # keeps what fits nowhere
    queued = RETRIES_PER_TENANT + 8
    for _ in range(queued):
        submit(server, flood, "cpu=100000")  # fits nowhere
    server.schedule()
    assert _tried_now(server, "flood") == queued  # new jobs are all tried once
    server.plane.bump()  # capacity changed: each may fit now
    fresh = submit(server, other, "A100:1")
    server.schedule()
    assert _tried_now(server, "flood") == RETRIES_PER_TENANT
    assert job(server, fresh["id"])["state"] == "scheduled"  # the new job was not held back
    server.schedule()  # the ones left out come next, without another change
    assert _tried_now(server, "flood") == queued


@pytest.mark.slow
def test_a_backlog_that_fits_goes_on_at_once(server: Server) -> None:
    node(server, "n1")
    lab = tenant(server, "lab")
    r = server.client.post("/v1/nodes/n1/cordon", headers=server.admin)
    assert r.status_code == 200
    backlog = [submit(server, lab, "A100 mem=4Gi cores=1%")["id"] for _ in range(20)]
    server.schedule()  # nowhere to go: every one failed once
    assert server.client.post("/v1/nodes/n1/uncordon", headers=server.admin).status_code == 200
    server.plane.wake.clear()
    assert server.schedule() == RETRIES_PER_TENANT
    assert server.plane.wake.is_set()  # the scheduler thread runs the next pass right away
    assert server.schedule() == 20 - RETRIES_PER_TENANT
    assert all(job(server, i)["state"] == "scheduled" for i in backlog)
