"""Dashboard pages in-process: the device grid's paging and grouping, the card panel, the
admin's card cordon, and what odd addresses get."""

from __future__ import annotations

import re

import pytest
from server_kit import Server, node_body, tenant

from xpupool.server.web.devices import PAGE_NODES

HERE = {"Origin": "http://testserver"}


@pytest.fixture
def signed_in(server: Server) -> Server:
    """Nodes on two sites (PAGE_NODES + 5 in 'b', 2 in 'a') and the admin signed in."""
    for i in range(PAGE_NODES + 5):
        body = node_body(f"b{i:02d}", count=2) | {"site": "b"}
        server.client.post("/v1/agent/register", json=body, headers=server.admin)
    for i in range(2):
        body = node_body(f"z{i}", count=2) | {"site": "a"}
        server.client.post("/v1/agent/register", json=body, headers=server.admin)
    server.client.follow_redirects = False
    r = server.client.post("/signin", data={"token": server.admin_token}, headers=HERE)
    assert r.status_code == 303
    return server


def _nodes(html: str) -> list[str]:
    return re.findall(r'data-node="([^"]+)"', html)


@pytest.mark.slow
def test_the_grid_shows_a_page_of_nodes_grouped_by_site(signed_in: Server) -> None:
    first = signed_in.client.get("/devices").text
    assert _nodes(first)[:3] == ["z0", "z1", "b00"]  # site 'a' first, then 'b', by name
    assert len(_nodes(first)) == PAGE_NODES
    assert re.findall(r'<h3 class="site">Site (\w+)</h3>', first) == ["a", "b"]
    assert "Page 1 of 2" in first
    second = signed_in.client.get("/devices", params={"page": 2}).text
    assert _nodes(second) == [f"b{i:02d}" for i in range(PAGE_NODES - 2, PAGE_NODES + 5)]
    only_b = signed_in.client.get("/devices", params={"site": "b", "page": 99}).text
    assert _nodes(only_b) == [f"b{i:02d}" for i in range(PAGE_NODES, PAGE_NODES + 5)]  # last page
    assert len(re.findall(r'class="tile ', first)) == 2 * PAGE_NODES


@pytest.mark.slow
def test_odd_addresses_get_an_html_answer(signed_in: Server) -> None:
    r = signed_in.client.get("/devices", params={"site": "nowhere"})
    assert r.status_code == 404 and "no site" in r.text and r.text.startswith("<!doctype html>")
    r = signed_in.client.get("/devices", params={"page": 0})
    assert r.status_code == 422 and r.text.startswith("<!doctype html>")
    r = signed_in.client.get("/devices", params={"card": "<b>no-such-card</b>"})
    assert r.status_code == 200 and 'id="panel"' not in r.text and "<b>no-such" not in r.text
    assert signed_in.client.get("/jobs/0").status_code == 422
    assert signed_in.client.get("/no-such-page").status_code == 404


@pytest.mark.slow
def test_the_admin_cordons_a_card_from_its_panel(signed_in: Server) -> None:
    c = signed_in.client
    panel = c.get("/devices", params={"card": "z0-gpu1"}).text
    assert re.search(r'id="panel-uuid">z0-gpu1<', panel)
    assert 'action="/cards/z0-gpu1/cordon"' in panel
    csrf = re.search(r'name="csrf" value="([^"]+)"', panel)
    assert csrf is not None
    r = c.post(
        "/cards/z0-gpu1/cordon",
        data={"csrf": csrf.group(1), "back": "/devices?card=z0-gpu1"},
        headers=HERE,
    )
    assert (r.status_code, r.headers["location"]) == (303, "/devices?card=z0-gpu1")
    devices = c.get("/v1/devices", params={"node": "z0"}, headers=signed_in.admin).json()
    assert [d["cordoned"] for d in devices] == [False, True]
    panel = c.get("/devices", params={"card": "z0-gpu1"}).text
    assert 'action="/cards/z0-gpu1/uncordon"' in panel
    assert re.search(r'class="tile a0 u0 cordoned"[^>]*data-uuid="z0-gpu1"', panel)
    r = c.post(
        "/cards/z0-gpu1/uncordon",
        data={"csrf": csrf.group(1), "back": "https://evil.test/"},
        headers=HERE,
    )
    assert r.headers["location"] == "/devices"  # only a path of this site is a way back


def test_a_jobs_page_names_its_volumes_and_secrets_never_a_value(server: Server) -> None:
    lab = tenant(server, "lab")
    value = "page-secret-value-31"
    r = server.client.put("/v1/secrets/hf", json={"secret": value}, headers=server.as_(lab))
    assert r.status_code == 201
    r = server.client.put("/v1/volumes/data", json={"path": "/srv/d"}, headers=server.admin)
    assert r.status_code == 201
    job = {
        "command": ["true"],
        "secrets": [{"name": "hf", "env": "HF_TOKEN"}],
        "volumes": [{"name": "data", "path": "/data", "read_only": True}],
    }
    r = server.client.post("/v1/jobs", json=job, headers=server.as_(lab))
    assert r.status_code == 201, r.text
    server.client.follow_redirects = False
    signin = server.client.post("/signin", data={"token": lab}, headers=HERE)
    assert signin.status_code == 303
    page = server.client.get(f"/jobs/{r.json()['id']}").text
    assert 'data-volume="data"' in page and "data at /data (read-only)" in page
    assert 'data-secret="hf"' in page and "(also as HF_TOKEN)" in page
    assert value not in page
