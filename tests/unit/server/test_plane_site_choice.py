"""The plane chooses the site (issue 51, part 2 on a live plane): a job that leaves more than one
site open is dispatched to one by ``SiteChooser`` inside the scheduling pass, the choice and the
runner-up are in its events with their numbers, and the chosen site is stored apart from the
sites the user allowed, so that a restart keeps it and a lost site can send the job elsewhere."""

from __future__ import annotations

from typing import Any

import pytest
from server_kit import Server, heartbeat, job, node_body, reopen, report, submit, tenant

from xpupool.model.site_network import parse_network


def site_node(server: Server, name: str, site: str, count: int) -> None:
    body = node_body(name, count=count) | {"site": site}
    r = server.client.post("/v1/agent/register", json=body, headers=server.admin)
    assert r.status_code == 200, r.text


def two_sites(server: Server) -> None:
    """``near`` holds the dataset; ``far`` is first in the pool's order and 25 Gbit/s away."""
    server.plane.site_network = parse_network(
        {
            "links": [{"sites": ["far", "near"], "bandwidth_gbps": 25}],
            "datasets": {"imagenet": {"size": "400Gi", "sites": ["near"]}},
        }
    )
    site_node(server, "f-0", "far", 4)
    site_node(server, "n-0", "near", 4)


def reasons(got: dict[str, Any]) -> list[str]:
    return [e["reason"] for e in got["events"]]


@pytest.mark.slow
def test_a_job_with_data_goes_to_the_site_holding_it_and_says_why(server: Server) -> None:
    two_sites(server)
    a = tenant(server, "a")
    placed = submit(server, a, "A100 data=imagenet")
    server.schedule()
    got = job(server, placed["id"])
    assert got["state"] == "scheduled"
    assert [x["node"] for x in got["assignments"]] == ["n-0"]
    said = reasons(got)
    assert any(r.startswith("chose site near: fits on 1 node, data 0 s") for r in said), said
    assert any(
        r.startswith("runner-up site far: fits on 1 node, data 137 s for 400 GiB at 25 Gbit/s")
        for r in said
    ), said
    assert got["site"] == "near"  # the plane's choice ...
    assert not got["request"].get("sites")  # ... apart from what the user allowed


@pytest.mark.slow
def test_a_job_waiting_for_its_site_keeps_it_across_a_restart(server: Server) -> None:
    """Both sites full: the job is dispatched by the wait estimator (one hour at each, no
    history) and transfer (near wins), stays pending there, and a restarted plane keeps it
    dispatched there without choosing again."""
    two_sites(server)
    a = tenant(server, "a")
    for spec in ("A100:4 site=far", "A100:4 site=near"):
        submit(server, a, spec)
    server.schedule()
    waiting = submit(server, a, "A100 data=imagenet")
    server.schedule()
    got = job(server, waiting["id"])
    assert got["state"] == "pending"
    assert got["site"] == "near"
    said = reasons(got)
    assert any(r.startswith("chose site near: queued at 1 for its shape") for r in said), said
    again = reopen(server)
    try:
        with again.client:
            assert again.plane.queued[waiting["id"]].site == "near"
            again.schedule()
            after = job(again, waiting["id"])
            assert after["site"] == "near"
            assert sum(r.startswith("chose site") for r in reasons(after)) == 1
    finally:
        again.plane.db.dispose()


@pytest.mark.slow
def test_a_job_naming_one_site_is_not_dispatched(server: Server) -> None:
    two_sites(server)
    a = tenant(server, "a")
    placed = submit(server, a, "A100 site=far data=imagenet")
    server.schedule()
    got = job(server, placed["id"])
    assert [x["node"] for x in got["assignments"]] == ["f-0"]
    assert got["site"] is None
    assert not any(r.startswith("chose site") for r in reasons(got))


@pytest.mark.slow
def test_the_wait_counts_the_run_time_learned_and_a_job_goes_far_when_the_wait_is_longer(
    server: Server,
) -> None:
    """A 4-card run at ``near`` succeeded after 600 s: the mean run time of its shape. With
    ``near`` full again, a 4-card job reading ``imagenet`` expects to wait 1 x 600 s there, more
    than the 137 s its data takes to reach the free ``far``: it goes far, and says so."""
    two_sites(server)
    a = tenant(server, "a")
    ran = submit(server, a, "A100:4 site=near")["id"]
    server.schedule()
    heartbeat(server, "n-0")
    heartbeat(server, "n-0", [report(ran, 0, "running")])
    server.clock.advance(600)
    heartbeat(server, "n-0", [report(ran, 0, "succeeded", 0)])
    assert job(server, ran)["state"] == "succeeded"
    submit(server, a, "A100:4 site=near")
    server.schedule()
    far = submit(server, a, "A100:4 data=imagenet")["id"]
    server.schedule()
    got = job(server, far)
    assert [x["node"] for x in got["assignments"]] == ["f-0"]
    said = reasons(got)
    assert any(
        r.startswith("chose site far: fits on 1 node, data 137 s for 400 GiB at 25 Gbit/s")
        for r in said
    ), said
    assert any(
        r.startswith(
            "runner-up site near: queued at 1 for its shape, wait 600 s "
            "(1 x 600 s, mean of 1 runs of its shape), data 0 s"
        )
        for r in said
    ), said


@pytest.mark.slow
def test_a_preferred_site_comes_first_and_the_events_say_so(server: Server) -> None:
    """prefer-site= leaves every site open and ranks its site first, before the data's."""
    two_sites(server)
    a = tenant(server, "a")
    placed = submit(server, a, "A100 prefer-site=far data=imagenet")
    server.schedule()
    got = job(server, placed["id"])
    assert [x["node"] for x in got["assignments"]] == ["f-0"]
    assert got["site"] == "far"
    said = reasons(got)
    assert any(r.startswith("chose site far:") and "preferred" in r for r in said), said
    assert any(r.startswith("runner-up site near: fits on 1 node, data 0 s") for r in said), said
