"""A job's replicas stay in one site (issue 42, part 3): the server admits a multi-replica job as
a gang, places it within one site unless it says ``span-sites``, and refuses at submission one
that no single site could hold even empty, though the pool could."""

from __future__ import annotations

from typing import Any

import pytest
from server_kit import Server, job, node_body, row_counts, submit, tenant

from xpupool.model.site_network import parse_network


def site_node(server: Server, name: str, site: str, count: int) -> None:
    body = node_body(name, count=count) | {"site": site}
    r = server.client.post("/v1/agent/register", json=body, headers=server.admin)
    assert r.status_code == 200, r.text


def three_sites(server: Server, c_cards: int) -> None:
    site_node(server, "a-0", "site-a", 4)
    site_node(server, "b-0", "site-b", 2)
    site_node(server, "c-0", "site-c", c_cards)


def nodes_of(got: dict[str, Any]) -> list[str]:
    return sorted(a["node"] for a in got["assignments"])


@pytest.mark.slow
def test_a_multi_replica_job_runs_within_one_site(server: Server) -> None:
    three_sites(server, c_cards=8)
    a = tenant(server, "a")
    placed = submit(server, a, "A100 replicas=7")  # the server runs it as a gang
    server.schedule()
    got = job(server, placed["id"])
    assert got["state"] == "scheduled"
    assert nodes_of(got) == ["c-0"] * 7


@pytest.mark.slow
def test_a_job_no_single_site_could_hold_is_422_naming_replicas(server: Server) -> None:
    three_sites(server, c_cards=2)  # 4 + 2 + 2 cards: the pool holds 7, no site does
    a = tenant(server, "a")
    before = row_counts(server)
    r = server.client.post(
        "/v1/jobs", json={"spec": "A100 replicas=7", "command": ["true"]}, headers=server.as_(a)
    )
    assert r.status_code == 422, r.text
    body = r.json()
    assert body["field"] == "spec.replicas"
    assert (
        "no single site holds 7 replicas of this, even empty (the largest: site-a, 4)"
        in (body["reason"])
    )
    assert "add span-sites to place it across sites" in body["reason"]
    assert row_counts(server) == before
    spanning = submit(server, a, "A100 replicas=7 span-sites")
    server.schedule()
    got = job(server, spanning["id"])
    assert got["state"] == "scheduled"
    assert got["request"]["span_sites"] is True
    assert set(nodes_of(got)) == {"a-0", "b-0", "c-0"}


@pytest.mark.slow
def test_a_job_naming_an_unknown_dataset_is_422_naming_the_known_ones(server: Server) -> None:
    """The sites file's datasets (``xpupool up --sites FILE``) are what ``data=`` may name."""
    server.plane.site_network = parse_network(
        {"datasets": {"imagenet": {"size": "150Gi", "sites": ["site-a"]}}}
    )
    three_sites(server, c_cards=2)
    a = tenant(server, "a")
    before = row_counts(server)
    r = server.client.post(
        "/v1/jobs", json={"spec": "A100 data=cifar", "command": ["true"]}, headers=server.as_(a)
    )
    assert r.status_code == 422, r.text
    assert r.json()["field"] == "spec.data"
    assert "known: imagenet" in r.json()["reason"]
    assert row_counts(server) == before
    assert submit(server, a, "A100 data=imagenet")["id"]


@pytest.mark.slow
def test_a_gang_across_sites_says_what_links_join_them(server: Server) -> None:
    server.plane.site_network = parse_network(
        {
            "links": [
                {"sites": ["site-a", "site-b"], "bandwidth_gbps": 25},
                {"sites": ["site-b", "site-c"], "bandwidth_gbps": 10},
            ]
        }
    )
    three_sites(server, c_cards=2)
    a = tenant(server, "a")
    spanning = submit(server, a, "A100 replicas=7 sites=any")
    server.schedule()
    got = job(server, spanning["id"])
    assert got["state"] == "scheduled"
    reasons = [e["reason"] for e in got["events"]]
    assert any(
        "across sites site-a, site-b, site-c: narrowest link 10 Gbit/s (site-a to site-c)" in r
        for r in reasons
    ), reasons
