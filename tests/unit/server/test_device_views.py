"""What a tenant sees of the cards (issue 42 part 3, docs/security.md): the job ids and shares of
its own jobs on a card, and only that another tenant's job uses it ("in use"), never which job
or how much each replica holds. The admin sees every job and share."""

from __future__ import annotations

import re
from typing import Any

import pytest
from server_kit import Server, node, submit, tenant

HERE = {"Origin": "http://testserver"}


def _two_tenants_on_one_card(server: Server) -> tuple[str, str, int, int]:
    """Tenants a and b each hold half of card n1-gpu0 (one job each); returns their tokens and
    job ids."""
    node(server, "n1", count=1)
    a, b = tenant(server, "a"), tenant(server, "b")
    ja = submit(server, a, "A100:1 cores=50% mem=20Gi", name="a-secret-name")["id"]
    jb = submit(server, b, "A100:1 cores=50% mem=10Gi", name="b-job")["id"]
    server.schedule()
    return a, b, int(ja), int(jb)


def _card(server: Server, token: str) -> dict[str, Any]:
    r = server.client.get("/v1/devices", headers=server.as_(token))
    assert r.status_code == 200, r.text
    return dict(next(d for d in r.json() if d["uuid"] == "n1-gpu0"))


def test_the_device_list_names_only_the_callers_own_jobs(server: Server) -> None:
    a, b, ja, jb = _two_tenants_on_one_card(server)
    seen_by_a, seen_by_b = _card(server, a), _card(server, b)
    assert (seen_by_a["jobs"], seen_by_a["in_use_by_others"]) == ([ja], True)
    assert (seen_by_b["jobs"], seen_by_b["in_use_by_others"]) == ([jb], True)
    admin = _card(server, server.admin_token)
    assert (admin["jobs"], admin["in_use_by_others"]) == (sorted([ja, jb]), False)
    # the card's totals are the fleet's aggregate: everyone sees them whole
    assert seen_by_a["allocated_memory_mib"] == admin["allocated_memory_mib"] == 30 * 1024


def test_a_card_no_other_tenant_uses_is_not_in_use_by_others(server: Server) -> None:
    node(server, "n1", count=1)
    a = tenant(server, "a")
    tenant(server, "b")
    ja = submit(server, a, "A100:1")["id"]
    server.schedule()
    assert (_card(server, a)["jobs"], _card(server, a)["in_use_by_others"]) == ([ja], False)


@pytest.mark.slow
def test_a_cards_detail_shows_only_the_callers_own_shares(server: Server) -> None:
    _, b, ja, jb = _two_tenants_on_one_card(server)
    r = server.client.get("/v1/devices/n1-gpu0", headers=server.as_(b))
    assert r.status_code == 200, r.text
    detail = r.json()
    assert [(x["job"], x["memory_mib"]) for x in detail["shares"]] == [(jb, 10 * 1024)]
    assert detail["jobs"] == [jb] and detail["in_use_by_others"] is True
    r = server.client.get("/v1/devices/n1-gpu0", headers=server.admin)
    assert {x["job"] for x in r.json()["shares"]} == {ja, jb}


@pytest.mark.slow
def test_the_card_panel_shows_another_tenants_use_as_anonymous_in_use(server: Server) -> None:
    _, b, ja, jb = _two_tenants_on_one_card(server)
    server.client.follow_redirects = False
    r = server.client.post("/signin", data={"token": b}, headers=HERE)
    assert r.status_code == 303
    html = server.client.get("/devices", params={"card": "n1-gpu0"}).text
    rows = re.search(r'<table id="panel-jobs">(.*?)</table>', html, re.S)
    assert rows is not None, html
    jobs = rows.group(1)
    assert f'href="/jobs/{jb}"' in jobs and f'href="/jobs/{ja}"' not in jobs
    assert "a-secret-name" not in html
    # one anonymous row for every other tenant's use, its figures the card's total less b's own
    assert jobs.count("<tr") == 3  # the header, b's replica, the anonymous row
    assert re.search(r"in use by other tenants", jobs)
    assert "20.0 GiB" in jobs  # the card holds 30 GiB in all, 10 of them b's
