"""The device grid's states in Chromium (issue 42): a cordoned node's cards, a cordoned card and an
idle one must not look alike, and no page counts "1 cards"."""

from __future__ import annotations

import re
from typing import Any

from browser_kit import DOMAIN_LABEL, Pool, sign_in

TILE_LOOK = """(el) => { const cs = getComputedStyle(el);
  return {classes: el.className, title: el.title, outline: cs.outlineStyle}; }"""


def test_cordoned_tiles_do_not_look_idle(browser: Any, pool: Pool) -> None:
    """Every card of a cordoned node, and a cordoned card, is marked (class and dashed outline)
    and says "cordoned" in its title; an idle card of a schedulable node is neither."""
    closed, open_node = "sh-k100-1", "sh-k100-0"
    cards = pool.admin.get("/v1/devices", params={"node": open_node}).json()
    card = next(d["uuid"] for d in cards if d["node"] == open_node)
    pool.admin.post(f"/v1/nodes/{closed}/cordon").raise_for_status()
    pool.admin.post(f"/v1/devices/{card}/cordon").raise_for_status()
    page = sign_in(browser, pool.url, pool.tokens["admin"])
    try:
        page.goto("/devices?site=shanghai")
        node = page.locator(f'div.node[data-node="{closed}"]')
        assert "cordoned" in (node.get_attribute("class") or "").split()
        tiles = [t.evaluate(TILE_LOOK) for t in node.locator("a.tile").all()]
        assert len(tiles) == 8
        for t in tiles:
            assert "cordoned" in t["classes"].split(), t
            assert "node cordoned" in t["title"], t
            assert t["outline"] == "dashed", t
        mine = page.locator(f'a.tile[data-uuid="{card}"]').evaluate(TILE_LOOK)
        assert "cordoned" in mine["classes"].split() and mine["outline"] == "dashed", mine
        others = page.locator(f'div.node[data-node="{open_node}"] a.tile:not([data-uuid="{card}"])')
        idle = others.first.evaluate(TILE_LOOK)
        assert "cordoned" not in idle["classes"].split() and "cordoned" not in idle["title"]
        assert idle["outline"] == "none", idle
    finally:
        pool.admin.post(f"/v1/nodes/{closed}/uncordon").raise_for_status()
        pool.admin.post(f"/v1/devices/{card}/uncordon").raise_for_status()
        page.context.close()


def test_no_page_counts_one_in_the_plural(browser: Any, pool: Pool) -> None:
    page = sign_in(browser, pool.url, pool.tokens["admin"])
    one_plural = re.compile(r"(?<![\d.,])1 (cards|nodes|jobs|samples|replicas)\b")
    uuid = pool.admin.get("/v1/devices").json()[0]["uuid"]
    for path in ("/", "/devices", f"/devices?card={uuid}", "/queues", "/jobs", "/submit"):
        page.goto(path)
        text = page.inner_text("main")
        assert not one_plural.search(text), (path, one_plural.search(text))
    page.context.close()


def test_a_nodes_link_domain_on_the_page_is_the_apis(browser: Any, pool: Pool) -> None:
    """The node carrying the sites file's link-domain label is in the domain its label names
    (GET /v1/nodes), its row says that domain, and its site's row lists the domain with the
    counts GET /v1/sites gives; a node without the label says none."""
    nodes = pool.admin.get("/v1/nodes").json()
    zoned = [n for n in nodes if n["link_domain"] is not None]
    assert [n["link_domain"] for n in zoned] == [n["labels"][DOMAIN_LABEL] for n in zoned]
    assert len(zoned) == 1, zoned
    node, plain = zoned[0], next(n for n in nodes if n["link_domain"] is None)
    (domain,) = next(s for s in pool.admin.get("/v1/sites").json() if s["name"] == node["site"])[
        "domains"
    ]
    page = sign_in(browser, pool.url, pool.tokens["admin"])
    try:
        page.goto(f"/devices?site={node['site']}")
        row = page.locator(f'div.node[data-node="{node["name"]}"] .domain')
        assert row.inner_text() == node["link_domain"]
        listed = page.locator(f'#site-list .domain[data-domain="{node["link_domain"]}"]')
        want = f"{domain['name']}: {domain['nodes']} node"
        assert listed.inner_text().startswith(want), listed.inner_text()
        assert f"{domain['devices_free']}/{domain['devices']} card" in listed.inner_text()
        page.goto(f"/devices?site={plain['site']}")
        assert page.locator(f'div.node[data-node="{plain["name"]}"] .domain').count() == 0
    finally:
        page.context.close()
