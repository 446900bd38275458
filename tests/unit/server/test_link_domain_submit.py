"""A gang stays in one link domain of the agent pool where the sites file names one
(``agents.link_domain_label``, issue 51): the plane reads the label from what agents register,
refuses at submission a gang no domain could hold even empty, keeps a waiting gang pending with
the reason, and places one that fits wholly in one domain; the API shows each node's domain and
each site's domains."""

from __future__ import annotations

from typing import Any

import pytest
from server_kit import Server, job, node, node_body, row_counts, submit, tenant

from xpupool.server.sites.agent_pool import AgentPoolSite

ZONE = "topology.kubernetes.io/zone"
ZONES = {"z1-0": "zone-1", "z1-1": "zone-1", "z2-0": "zone-2", "z2-1": "zone-2"}


def zoned(server: Server) -> None:
    """Four nodes of two A100s, two per zone, the agent pool reading ``ZONE``."""
    pool = server.plane.sites["agents"]
    assert isinstance(pool, AgentPoolSite)
    pool.link_domain_label = ZONE
    for name, zone in ZONES.items():
        body = node_body(name, count=2) | {"labels": {ZONE: zone}}
        r = server.client.post("/v1/agent/register", json=body, headers=server.admin)
        assert r.status_code == 200, r.text


def zones_of(got: dict[str, Any]) -> list[str]:
    return sorted(ZONES[a["node"]] for a in got["assignments"])


@pytest.mark.slow
def test_a_gang_waits_saying_why_and_one_that_fits_a_zone_is_placed_in_it(server: Server) -> None:
    """One node of each zone full: two cards free per zone, four in all."""
    zoned(server)
    a = tenant(server, "a")
    for zone in ("zone-1", "zone-2"):
        filler = submit(server, a, f"A100:2 label={ZONE}={zone}")
        server.schedule()
        got = job(server, filler["id"])
        assert got["state"] == "scheduled" and zones_of(got) == [zone], got
    three = submit(server, a, "A100 replicas=3 gang")
    server.schedule()
    got = job(server, three["id"])
    assert got["state"] == "pending" and not got["assignments"], got
    assert "no single link domain holds 3 replicas at once" in got["reason"], got["reason"]
    two = submit(server, a, "A100 replicas=2 gang")
    server.schedule()
    got = job(server, two["id"])
    assert got["state"] == "scheduled" and len(set(zones_of(got))) == 1, got


@pytest.mark.slow
def test_a_gang_no_zone_could_ever_hold_is_422_naming_replicas(server: Server) -> None:
    zoned(server)
    a = tenant(server, "a")
    before = row_counts(server)
    r = server.client.post(
        "/v1/jobs",
        json={"spec": "A100 replicas=5 gang", "command": ["true"]},
        headers=server.as_(a),
    )
    assert r.status_code == 422, r.text
    body = r.json()
    assert body["field"] == "spec.replicas"
    assert "no single link domain holds 5 replicas of this, even empty" in body["reason"]
    assert "(the largest: default/zone-1, 4)" in body["reason"], body["reason"]
    assert row_counts(server) == before


@pytest.mark.slow
def test_the_api_shows_each_nodes_domain_and_each_sites_domains_with_their_cards(
    server: Server,
) -> None:
    """A node without the label is in its site's unnamed domain (listed last); the free cards
    of a domain drop by what a job there holds."""
    zoned(server)
    node(server, "bare", count=2)
    filler = submit(server, tenant(server, "a"), f"A100:2 label={ZONE}=zone-1")
    server.schedule()
    assert job(server, filler["id"])["state"] == "scheduled"
    nodes = server.client.get("/v1/nodes", headers=server.admin).json()
    assert {n["name"]: n["link_domain"] for n in nodes} == {**ZONES, "bare": None}
    one = server.client.get("/v1/nodes/z2-1", headers=server.admin).json()
    assert one["link_domain"] == "zone-2"
    (site,) = server.client.get("/v1/sites", headers=server.admin).json()
    assert site["domains"] == [
        {"name": "zone-1", "nodes": 2, "devices": 4, "devices_free": 2},
        {"name": "zone-2", "nodes": 2, "devices": 4, "devices_free": 4},
        {"name": None, "nodes": 1, "devices": 2, "devices_free": 2},
    ]
