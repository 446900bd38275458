"""A site that stops answering (issue 51, part 3): once every node of it is lost, its running job
is shown ``unknown`` and keeps its devices and quota however long the silence (never failed or
requeued on the plane's word alone), a pending job dispatched there that may run elsewhere is
dispatched again among the sites that answer, a job saying ``on_site_lost: requeue`` goes back to
its queue once the lease is over, and a site that answers again reconciles its jobs by its reports."""

from __future__ import annotations

from typing import Any

import pytest
from server_kit import Server, heartbeat, job, queue_used, reopen, report, submit, tenant
from test_plane_site_choice import reasons, two_sites

from xpupool.server.services.agents import mark_lost_nodes


def run(server: Server, node: str, job_id: int) -> None:
    heartbeat(server, node)
    heartbeat(server, node, [report(job_id, 0, "running")])
    assert job(server, job_id)["state"] == "running"


def silence(server: Server, seconds: float, alive: str, reports: list[dict[str, Any]]) -> None:
    """``seconds`` pass in which only node ``alive`` heartbeats; then the lost-node watch."""
    server.clock.advance(seconds)
    heartbeat(server, alive, reports)
    mark_lost_nodes(server.plane)


@pytest.mark.slow
def test_a_lost_site_leaves_its_job_unknown_and_sends_its_queue_elsewhere(server: Server) -> None:
    two_sites(server)
    a = tenant(server, "a")
    near = submit(server, a, "A100:4 site=near")["id"]
    far = submit(server, a, "A100:4 site=far")["id"]
    server.schedule()
    run(server, "n-0", near)
    run(server, "f-0", far)
    waiting = submit(server, a, "A100:4 data=imagenet")["id"]
    server.schedule()
    assert job(server, waiting)["site"] == "near"  # both full: the data's site
    held = queue_used(server, "a")
    on_far = [report(far, 0, "running")]

    silence(server, server.plane.lost_after_s + 1, "f-0", on_far)
    got = job(server, near)
    assert got["state"] == "unknown"
    assert any(r.startswith("site near unreachable: every node silent") for r in reasons(got))
    assert queue_used(server, "a") == held  # its quota keeps holding
    shown = server.client.get("/v1/sites", headers=server.admin).json()
    assert {x["name"]: x["reachable"] for x in shown} == {"far": True, "near": False}
    server.schedule()  # far is the one site left open to it: no choice, it waits for any
    moved = job(server, waiting)
    assert moved["state"] == "pending" and moved["site"] is None
    assert "site near takes no new work (drained or unreachable): dispatched again" in reasons(
        moved
    )

    silence(server, 20 * server.plane.lost_after_s, "f-0", on_far)  # far past the lease
    assert job(server, near)["state"] == "unknown"
    assert queue_used(server, "a") == held

    heartbeat(server, "n-0", [report(near, 0, "running")])  # the site answers again
    mark_lost_nodes(server.plane)
    back = job(server, near)
    assert back["state"] == "running"
    heartbeat(server, "n-0", [report(near, 0, "succeeded", 0)])
    assert job(server, near)["state"] == "succeeded"
    server.schedule()  # near free again: dispatched among the two sites that answer
    moved = job(server, waiting)
    assert moved["site"] == "near" and moved["state"] == "scheduled"


@pytest.mark.slow
def test_a_job_saying_requeue_goes_back_to_its_queue_once_the_lease_is_over(
    server: Server,
) -> None:
    two_sites(server)
    a = tenant(server, "a")
    near = submit(server, a, "A100:4 site=near", on_site_lost="requeue")["id"]
    server.schedule()
    run(server, "n-0", near)
    assert job(server, near)["on_site_lost"] == "requeue"
    silence(server, server.plane.lost_after_s + 1, "f-0", [])
    assert job(server, near)["state"] == "running"  # not unknown: the lost-node rule applies
    silence(server, 20 * server.plane.lost_after_s, "f-0", [])
    assert job(server, near)["state"] == "pending"


@pytest.mark.slow
def test_a_restarted_plane_keeps_an_unknown_job_and_its_site_reconciles_it(server: Server) -> None:
    """Unknown is stored: a restarted plane holds the job's devices as before, and the site's
    report of its replica (here, that it ended) settles it."""
    two_sites(server)
    a = tenant(server, "a")
    near = submit(server, a, "A100:4 site=near")["id"]
    server.schedule()
    run(server, "n-0", near)
    silence(server, server.plane.lost_after_s + 1, "f-0", [])
    assert job(server, near)["state"] == "unknown"
    held = queue_used(server, "a")
    again = reopen(server)
    try:
        with again.client:
            assert job(again, near)["state"] == "unknown"
            assert queue_used(again, "a") == held
            heartbeat(again, "n-0", [report(near, 0, "succeeded", 0)])
            assert job(again, near)["state"] == "succeeded"
    finally:
        again.plane.db.dispose()
