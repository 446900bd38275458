"""Link domains in the fleet overview and ``/metrics`` (issue 51): each site that names domains
shows them with their nodes and cards, as ``GET /v1/sites`` does; nothing is added for a pool
without domains; the gauges stay bounded however many domains agents name."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families
from server_kit import Server, node, node_body, submit, tenant

from xpupool.server.domain_gauges import MAX_DOMAIN_SERIES
from xpupool.server.sites.agent_pool import AgentPoolSite

RACK = "rack"


def racked(server: Server, racks: dict[str, str | None]) -> None:
    """A node of two A100s per entry of ``racks`` (node -> rack; None: no label), the agent
    pool reading ``RACK``."""
    pool = server.plane.sites["agents"]
    assert isinstance(pool, AgentPoolSite)
    pool.link_domain_label = RACK
    for name, rack in racks.items():
        body = node_body(name, count=2) | {"labels": {} if rack is None else {RACK: rack}}
        r = server.client.post("/v1/agent/register", json=body, headers=server.admin)
        assert r.status_code == 200, r.text


def gauges(server: Server) -> dict[str, dict[tuple[str, str], float]]:
    """The ``xpupool_domain_*`` families: name -> {(site, domain): value}."""
    text = server.client.get("/metrics", headers=server.admin).text
    return {
        f.name: {(s.labels["site"], s.labels["domain"]): s.value for s in f.samples}
        for f in text_string_to_metric_families(text)
        if f.name.startswith("xpupool_domain_")
    }


@pytest.mark.slow
def test_the_overview_and_metrics_give_each_domain_its_nodes_and_cards(server: Server) -> None:
    racked(server, {"r1-a": "row-1", "r1-b": "row-1", "r2-a": "row-2", "bare": None})
    held = submit(server, tenant(server, "a"), f"A100:2 label={RACK}=row-2")
    server.schedule()
    assert (
        server.client.get(f"/v1/jobs/{held['id']}", headers=server.admin).json()["state"]
        == "scheduled"
    )
    ov = server.client.get("/v1/fleet/overview", headers=server.admin).json()
    assert ov["domains"] == [
        {
            "site": "default",
            "name": "row-1",
            "nodes": 2,
            "devices_total": 4,
            "devices_free": 4,
            "devices_allocated": 0,
        },
        {
            "site": "default",
            "name": "row-2",
            "nodes": 1,
            "devices_total": 2,
            "devices_free": 0,
            "devices_allocated": 2,
        },
        {
            "site": "default",
            "name": None,
            "nodes": 1,
            "devices_total": 2,
            "devices_free": 2,
            "devices_allocated": 0,
        },
    ]
    (site,) = server.client.get("/v1/sites", headers=server.admin).json()
    assert [(d["name"], d["devices_free"]) for d in site["domains"]] == [
        (d["name"], d["devices_free"]) for d in ov["domains"]
    ]
    got = gauges(server)
    assert got["xpupool_domain_devices"] == {
        ("default", "row-1"): 4,
        ("default", "row-2"): 2,
        ("default", ""): 2,
    }
    assert got["xpupool_domain_devices_free"][("default", "row-2")] == 0
    assert got["xpupool_domain_devices_allocated"][("default", "row-2")] == 2
    assert got["xpupool_domain_nodes"][("default", "row-1")] == 2


@pytest.mark.slow
def test_a_pool_without_domains_adds_nothing(server: Server) -> None:
    node(server, "n1", count=2)
    ov = server.client.get("/v1/fleet/overview", headers=server.admin).json()
    assert ov["domains"] == []
    assert gauges(server) == {}


@pytest.mark.slow
def test_the_gauges_stay_bounded_however_many_domains_agents_name(server: Server) -> None:
    """Agents name their labels: one per node here, twice the bound. The largest domains are
    named, the rest summed into one series, so no card goes uncounted."""
    many = MAX_DOMAIN_SERIES * 2
    racked(server, {f"n{i:03d}": f"rack-{i:03d}" for i in range(many)})
    got = gauges(server)
    for family in got.values():
        assert len(family) == MAX_DOMAIN_SERIES + 1
    devices = got["xpupool_domain_devices"]
    assert devices[("(other)", "(other)")] == 2 * (many - MAX_DOMAIN_SERIES)
    assert sum(devices.values()) == 2 * many
    assert ("default", "rack-000") in devices  # equals by cards are named by site and name


@pytest.mark.slow
def test_no_label_value_an_agent_names_collides_with_the_unnamed_or_other_series(
    server: Server,
) -> None:
    """A duplicate series would make Prometheus refuse the whole scrape: the unnamed domain
    is ``domain=""`` (a node with an empty label value is in no domain) and the rest
    ``site="(other)"`` (no site may be named so)."""
    racked(server, {"forged": "(no label)", "other": "(other)", "bare": None})
    text = server.client.get("/metrics", headers=server.admin).text
    (family,) = [
        f for f in text_string_to_metric_families(text) if f.name == "xpupool_domain_devices"
    ]
    keys = [(s.labels["site"], s.labels["domain"]) for s in family.samples]
    assert sorted(keys) == [("default", ""), ("default", "(no label)"), ("default", "(other)")]
