"""The dashboard end to end in Chromium: sign-in, the fleet figures against the API's, the pages a
tenant and the admin see, and the protections (escaping, CSRF, the token kept out of the page)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
from browser_kit import Pool, axe_violations, dom_nodes, shot, sign_in
from job_commands import JOB_PYTHON
from playwright.sync_api import expect
from server_proc import ROOT, ServerProc, free_port, until


def test_sign_in_keeps_the_token_out_of_the_browser(browser: Any, pool: Pool) -> None:
    token = pool.tokens["team"]
    page = sign_in(browser, pool.url, token)
    cookies = page.context.cookies()
    assert [c["name"] for c in cookies] == ["xpupool_session"]
    session = cookies[0]
    assert session["httpOnly"] is True
    assert session["sameSite"] == "Strict"
    assert token not in session["value"]
    assert token not in page.content()
    assert token not in page.url
    assert page.evaluate("() => document.cookie") == ""  # HttpOnly: scripts cannot read it
    page.click("text=Sign out")
    page.wait_for_url(f"{pool.url}/signin")
    page.goto("/")
    assert page.url == f"{pool.url}/signin"  # the session is gone server-side
    page.context.close()


def test_a_wrong_token_is_refused_next_to_the_field(browser: Any, pool: Pool) -> None:
    context = browser.new_context(base_url=pool.url)
    page = context.new_page()
    page.goto("/signin")
    page.fill("#token", "xpp_not-a-token")
    page.click("button[type=submit]")
    assert page.text_content("#token-error") == "Unknown or revoked token."
    assert context.cookies() == []
    context.close()


def test_fleet_numbers_equal_the_api(browser: Any, pool: Pool, axe_source: str) -> None:
    """Per site, the page's cards, allocated, busy and cordoned are the sums of
    /v1/fleet/overview's groups, and its cards and allocated agree with /v1/devices."""
    page = sign_in(browser, pool.url, pool.tokens["admin"])
    overview = pool.admin.get("/v1/fleet/overview").json()
    devices = pool.admin.get("/v1/devices").json()
    sites = sorted({g["site"] for g in overview["groups"]})
    assert sites == ["beijing", "guangzhou", "shanghai"]  # the agent's site among them
    facts = {s["name"]: s for s in pool.admin.get("/v1/sites").json()}
    for site in sites:
        groups = [g for g in overview["groups"] if g["site"] == site]
        row = page.locator(f'#sites tr[data-site="{site}"]')
        # each site's kind, state and dispatched work, as /v1/sites says
        assert row.locator('[data-k="kind"]').text_content() == facts[site]["kind"] == "agents"
        assert row.locator('[data-k="state"]').text_content() == "reachable"
        assert row.locator('[data-k="pending"]').text_content() == f"{facts[site]['pending']:,}"
        for key in ("devices_total", "devices_allocated", "devices_busy"):
            want = sum(g[key] for g in groups)
            assert row.locator(f'[data-k="{key}"]').text_content() == f"{want:,}", (site, key)
        mine = [d for d in devices if d["site"] == site]
        held = [d for d in mine if d["allocated_memory_mib"] or d["allocated_core_permille"]]
        assert sum(g["devices_total"] for g in groups) == len(mine)
        assert sum(g["devices_allocated"] for g in groups) == len(held)
    assert page.text_content("#total-devices") == f"{len(devices):,}"
    assert page.text_content("#jobs-pending") == f"{overview['jobs']['pending']:,}"
    assert axe_violations(page, axe_source) == []
    assert dom_nodes(page) <= 5000
    page.context.close()


def test_axe_reports_what_it_should(browser: Any, axe_source: str) -> None:
    """The accessibility check can fail: an image without alt text is a critical violation."""
    page = browser.new_page()
    page.set_content('<html lang="en"><title>t</title><img src="data:,">')
    assert [v["id"] for v in axe_violations(page, axe_source)] == ["image-alt"]
    page.close()


def _wait_job(api: httpx.Client, job_id: int, check: Any, what: str) -> dict[str, Any]:
    return dict(until(lambda: check(j := api.get(f"/v1/jobs/{job_id}").json()) and j, what, 60))


def test_a_job_submitted_through_the_form_runs_on_its_card_with_its_log(
    browser: Any, pool: Pool, axe_source: str
) -> None:
    """Live validation next to the field, submit, the job's page with its log tail, its card's
    panel, a pending job's reason in its queue, and the cancel button."""
    team = pool.api("team")
    page = sign_in(browser, pool.url, pool.tokens["team"])
    page.goto("/submit")
    page.fill("#request", "910B3:8 mem=4Gx")
    expect(page.locator("#request-error")).to_contain_text("unknown memory unit 'Gx'")
    shot(page, "dashboard-submit")
    assert page.get_attribute("#request", "aria-invalid") == "true"
    page.fill("#request", "910B3:8 replicas=2")
    expect(page.locator("#request-error")).to_have_text("")
    page.fill("#name", "form-job")
    page.fill(
        "#command",
        f"{JOB_PYTHON} -c \"print('hello from the dashboard', flush=True); "
        'import time; time.sleep(60)"',
    )
    assert axe_violations(page, axe_source) == []
    page.click("#submit-job")
    page.wait_for_url(re.compile(r".*/jobs/\d+$"))
    job_id = int(page.url.rsplit("/", 1)[1])
    assert team.get(f"/v1/jobs/{job_id}").json()["name"] == "form-job"
    expect(page.locator("#job-state")).to_have_text("running", timeout=30_000)
    expect(page.locator("#log")).to_contain_text("hello from the dashboard", timeout=30_000)
    assert axe_violations(page, axe_source) == []
    page.evaluate("() => document.getElementById('log-h').scrollIntoView()")
    shot(page, "dashboard-job")

    # its card: the tile is full, the panel lists the job
    job = team.get(f"/v1/jobs/{job_id}").json()
    uuid = job["assignments"][0]["devices"][0]["uuid"]
    page.goto(f"/devices?card={uuid}")
    expect(page.locator("#panel-uuid")).to_have_text(uuid)
    expect(page.locator(f'#panel-jobs a[href="/jobs/{job_id}"]')).to_be_visible()
    assert "a10" in (page.get_attribute(f'a.tile[data-uuid="{uuid}"]', "class") or "")
    shot(page, "dashboard-devices", dark=True)
    assert axe_violations(page, axe_source) == []

    # a second one cannot fit while the first holds every 910B3: its reason is on the queue page
    r = team.post(
        "/v1/jobs",
        json={
            "name": "waits",
            "request": "910B3:8 replicas=2",
            "command": [JOB_PYTHON, "-c", "pass"],
        },
    )
    assert r.status_code == 201, r.text
    waiting = r.json()["id"]
    api_job = _wait_job(
        team,
        waiting,
        lambda j: j["reason"] != "waiting for the scheduler",
        "the scheduler to try the second job",
    )
    page.goto("/queues")
    row = page.locator(f'section[data-queue="team"] table.pending tr[data-job="{waiting}"]')
    expect(row.locator(".reason")).to_have_text(api_job["reason"])
    shot(page, "dashboard-queues")
    if os.environ.get("XPUPOOL_SCREENSHOTS"):  # the admin's overview while one runs, one waits
        admin = sign_in(browser, pool.url, pool.tokens["admin"])
        shot(admin, "dashboard-overview")
        admin.context.close()
    assert api_job["state"] == "pending"
    assert axe_violations(page, axe_source) == []

    # cancel the first through its page: the second then runs
    page.goto(f"/jobs/{job_id}")
    page.click("#cancel")
    _wait_job(team, job_id, lambda j: j["state"] == "cancelled", "the cancel to finish")
    _wait_job(team, waiting, lambda j: j["state"] != "pending", "the second job to be placed")
    page.context.close()


def test_a_tenant_sees_only_its_own_jobs(browser: Any, pool: Pool) -> None:
    team = pool.api("team")
    r = team.post("/v1/jobs", json={"name": "team-secret", "command": [JOB_PYTHON, "-c", "pass"]})
    assert r.status_code == 201, r.text
    theirs = r.json()["id"]
    page = sign_in(browser, pool.url, pool.tokens["other"])
    page.goto("/jobs")
    assert page.locator(f'#job-list tr[data-job="{theirs}"]').count() == 0
    assert "team-secret" not in page.content()
    page.goto(f"/jobs/{theirs}")
    expect(page.locator("#error-reason")).to_contain_text("not found")
    assert "team-secret" not in page.content()
    page.goto("/queues")
    assert page.locator('section[data-queue="team"]').count() == 0
    assert page.locator('section[data-queue="other"]').count() == 1
    page.goto("/")  # the fleet aggregate is still everybody's
    total = len(pool.admin.get("/v1/devices").json())
    assert page.text_content("#total-devices") == f"{total:,}"

    # a card team's job holds: its share is shown, the job is not named
    r = team.post(
        "/v1/jobs",
        json={
            "name": "team-card",
            "request": "K100_AI:1",
            "command": [JOB_PYTHON, "-c", "import time; time.sleep(60)"],
        },
    )
    assert r.status_code == 201, r.text
    held = _wait_job(team, r.json()["id"], lambda j: j["assignments"], "team's job placed")
    uuid = held["assignments"][0]["devices"][0]["uuid"]
    page.goto(f"/devices?card={uuid}")
    expect(page.locator("#panel-jobs")).to_contain_text("in use by other tenants")
    assert page.locator(f'#panel-jobs a[href="/jobs/{held["id"]}"]').count() == 0
    assert "team-card" not in page.content()
    team.post(f"/v1/jobs/{held['id']}/cancel")
    page.context.close()


def test_a_job_named_with_markup_shows_as_text(browser: Any, pool: Pool, axe_source: str) -> None:
    name = "<script>alert(1)</script><img src=x onerror=alert(2)>"
    team = pool.api("team")
    r = team.post(
        "/v1/jobs",
        json={
            "name": name,
            "command": [JOB_PYTHON, "-c", "print('<b>x</b>')"],
            "env": {"<i>KEY</i>": "v"},
        },
    )
    assert r.status_code == 201, r.text
    job_id = r.json()["id"]
    page = sign_in(browser, pool.url, pool.tokens["admin"])
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(f"/jobs/{job_id}")
    expect(page.locator("#job-name")).to_have_text(name)
    expect(page.locator("#log")).to_contain_text("<b>x</b>", timeout=30_000)
    assert page.locator("#main script, #main img").count() == 0
    page.goto("/jobs")
    expect(page.locator(f'#job-list tr[data-job="{job_id}"] td').nth(1)).to_have_text(name)
    assert page.locator("#main script, #main img").count() == 0
    assert dialogs == []
    page.context.close()


def test_a_cross_site_form_post_is_refused(browser: Any, pool: Pool) -> None:
    """A page of another origin posts the cancel form, even with the session's CSRF secret: from
    another site the browser withholds the cookie (SameSite=Strict); from another port of this
    host (same site: the cookie goes along) the Origin check refuses it."""
    team = pool.api("team")
    r = team.post(
        "/v1/jobs",
        json={
            "name": "victim",
            "request": "L20:1",
            "command": [JOB_PYTHON, "-c", "import time; time.sleep(60)"],
        },
    )
    assert r.status_code == 201, r.text
    job_id = r.json()["id"]
    page = sign_in(browser, pool.url, pool.tokens["team"])
    page.goto(f"/jobs/{job_id}")
    secret = page.input_value("#job-live input[name=csrf]")
    attack = (
        f'<html><body><form id="f" method="post" action="{pool.url}/jobs/{job_id}/cancel">'
        f'<input type="hidden" name="csrf" value="{secret}"></form>'
        "<script>document.getElementById('f').submit()</script></body></html>"
    )
    other_port = f"http://127.0.0.1:{free_port()}"
    for origin in ("http://evil.test", other_port):
        page.context.route(
            f"{origin}/**",
            lambda route: route.fulfill(status=200, content_type="text/html", body=attack),
        )
        with page.expect_navigation(url=re.compile(re.escape(pool.url))):
            page.goto(f"{origin}/attack")
        if origin == other_port:
            expect(page.locator("#error-reason")).to_contain_text("cross-site request refused")
        else:
            assert page.url == f"{pool.url}/signin"  # no cookie came along: not signed in
        state = team.get(f"/v1/jobs/{job_id}").json()
        assert state["state"] not in ("cancelled",) and state["stop_cause"] is None, state
    team.post(f"/v1/jobs/{job_id}/cancel")
    page.context.close()


def test_the_admin_cordons_a_node_from_the_grid(browser: Any, pool: Pool) -> None:
    page = sign_in(browser, pool.url, pool.tokens["admin"])
    page.goto("/devices?site=shanghai")
    node = page.locator('div.node[data-node="sh-mlu-0"]')
    node.get_by_role("button", name="Cordon node sh-mlu-0").click()
    page.wait_for_url(f"{pool.url}/devices?site=shanghai")
    assert pool.admin.get("/v1/nodes/sh-mlu-0").json()["schedulable"] is False
    page.locator('div.node[data-node="sh-mlu-0"]').get_by_role(
        "button", name="Uncordon node sh-mlu-0"
    ).click()
    page.wait_for_url(f"{pool.url}/devices?site=shanghai")
    assert pool.admin.get("/v1/nodes/sh-mlu-0").json()["schedulable"] is True
    tenant = sign_in(browser, pool.url, pool.tokens["team"])
    tenant.goto("/devices?site=shanghai")
    assert tenant.get_by_role("button", name="Cordon node sh-mlu-0").count() == 0
    page.context.close()
    tenant.context.close()


def test_pages_update_in_place_and_work_from_the_keyboard(
    browser: Any, pool: Pool, axe_source: str
) -> None:
    page = sign_in(browser, pool.url, pool.tokens["admin"])
    cell = page.locator('#models tr[data-model="MLU370-X8"] [data-k="devices_allocated"]')
    before = int((cell.text_content() or "").replace(",", ""))
    page.evaluate("() => { window.notReloaded = true; }")
    r = pool.api("other").post(
        "/v1/jobs",
        json={
            "name": "live",
            "request": "MLU370-X8:1",
            "command": [JOB_PYTHON, "-c", "import time; time.sleep(60)"],
        },
    )
    assert r.status_code == 201, r.text
    expect(cell).to_have_text(f"{before + 1:,}", timeout=20_000)  # the fragment poll
    assert page.evaluate("() => window.notReloaded") is True

    # keyboard only: the skip link first, then Tab to a card's tile and Enter opens its panel
    page.goto("/devices?site=shanghai")
    page.keyboard.press("Tab")
    assert page.evaluate("() => document.activeElement.textContent") == "Skip to content"
    for _ in range(60):
        page.keyboard.press("Tab")
        if page.evaluate("() => document.activeElement.classList.contains('tile')"):
            break
    else:
        raise AssertionError("no card tile reached with Tab")
    uuid = page.evaluate("() => document.activeElement.dataset.uuid")
    page.keyboard.press("Enter")
    expect(page.locator("#panel-uuid")).to_have_text(uuid)
    page.emulate_media(color_scheme="dark")
    assert axe_violations(page, axe_source) == []
    pool.api("other").post(f"/v1/jobs/{r.json()['id']}/cancel")
    page.context.close()


def test_every_page_loads_without_a_console_error(browser: Any, pool: Pool) -> None:
    """No script or style is blocked by the pages' Content-Security-Policy and nothing fails to
    load: Chromium reports either on the console."""
    page = sign_in(browser, pool.url, pool.tokens["admin"])
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    r = pool.api("team").post("/v1/jobs", json={"name": "quiet", "command": [JOB_PYTHON, "-V"]})
    job_id = r.json()["id"]
    for path in (
        "/",
        "/devices",
        "/devices?site=beijing",
        "/queues",
        "/jobs",
        "/submit",
        "/usage",
        f"/jobs/{job_id}",
    ):
        page.goto(path)
        page.wait_for_load_state("load")
        page.wait_for_timeout(300)  # the first poll of a log tail
    assert errors == []
    page.evaluate(
        "() => { const s = document.createElement('script'); "
        "s.textContent = 'window.ran = 1'; document.body.append(s); }"
    )
    assert page.evaluate("() => window.ran") is None  # an inline script does not run
    assert any("Content Security Policy" in e for e in errors)  # and the browser says why
    page.context.close()


def test_the_history_charts_are_the_servers_series(browser: Any, pool: Pool) -> None:
    def series(**params: str) -> list[dict[str, Any]]:
        got = pool.admin.get("/v1/fleet/history", params={"window": "1h", **params})
        assert got.status_code == 200, got.text
        return list(got.json()["series"])

    def sampled() -> bool:
        return any(x["name"] == "devices_total" and x["points"] for x in series())

    until(sampled, "the server's first history sample")
    page = sign_in(browser, pool.url, pool.tokens["admin"])
    page.goto("/?window=1h")
    listed = series()
    rows = page.locator("#history-table tbody tr")
    assert [r.get_attribute("data-series") for r in rows.all()] == [x["name"] for x in listed]
    total = next(x for x in listed if x["name"] == "devices_total")
    cell = page.locator('#history-table tr[data-series="devices_total"] td.last')
    assert cell.text_content() == f"{total['points'][-1][1]:,.0f}"
    page.evaluate("() => document.getElementById('history-h').scrollIntoView()")
    shot(page, "dashboard-history")
    page.goto("/?window=1d&site=beijing")
    sites = {r.locator("td").nth(1).text_content() for r in rows.all()}
    assert sites == {"beijing"}
    page.goto("/?window=1h&site=atlantis")
    expect(page.locator("#history-error")).to_contain_text("site: no such site")
    page.context.close()


def test_the_usage_page_shows_a_tenant_its_budget_and_spend_as_the_api(
    browser: Any, pool: Pool, axe_source: str
) -> None:
    """The usage page from the main navigation: the tenant's budget and spend as its own
    ``GET /v1/tenants/{t}/budget`` says, its own rows only, accessible."""
    prices = {"currency": "EUR", "models": [{"model": "910B3", "per_card_hour": 1.5}]}
    assert pool.admin.put("/v1/prices", json=prices).status_code == 200
    budget = {"period": "week", "amount": 1000, "policy": "warn"}
    assert pool.admin.put("/v1/tenants/other/budget", json=budget).status_code == 200
    page = sign_in(browser, pool.url, pool.tokens["other"])
    page.click("nav >> text=Usage")
    page.wait_for_url(f"{pool.url}/usage")
    mine = pool.api("other").get("/v1/tenants/other/budget").json()
    expect(page.locator('#budget [data-k="amount"]')).to_have_text("1000.00")
    assert float(page.text_content('#budget [data-k="spent"]') or "") == pytest.approx(
        mine["spent"], abs=0.01
    )
    tenants = page.locator("#usage-tenants tr[data-tenant]")
    assert {tenants.nth(i).get_attribute("data-tenant") for i in range(tenants.count())} <= {
        "other"
    }
    page.select_option("#window", "1w")
    page.click("text=Show")
    page.wait_for_url(re.compile(r".*/usage\?window=1w$"))
    assert axe_violations(page, axe_source) == []
    shot(page, "dashboard-usage")
    assert pool.admin.delete("/v1/tenants/other/budget").status_code == 204
    page.context.close()


def test_the_usage_page_shows_energy_per_site_and_model_over_time_as_the_api(
    browser: Any, pool: Pool
) -> None:
    """The usage page's energy section lists per site and per card model the kWh that ``GET
    /v1/usage?by=site,model`` sums to (read before and after the page: energy only grows), with
    a sparkline of its buckets."""
    team = pool.api("team")
    r = team.post(
        "/v1/jobs",
        json={
            "name": "warm",
            "request": "A100:1",
            "command": [JOB_PYTHON, "-c", "import time; time.sleep(60)"],
        },
    )
    assert r.status_code == 201, r.text
    job_id = r.json()["id"]

    def kwh(label: str) -> dict[str, float]:
        got = pool.admin.get("/v1/usage", params={"by": "site,model", "step": "day"})
        assert got.status_code == 200, got.text
        out: dict[str, float] = {}
        for row in got.json()["rows"]:
            out[row[label] or ""] = out.get(row[label] or "", 0.0) + row["energy_j"] / 3.6e6
        return {name: v for name, v in out.items() if v > 0}

    until(lambda: kwh("site"), "the first usage flush with energy", 90)
    page = sign_in(browser, pool.url, pool.tokens["admin"])
    before = {label: kwh(label) for label in ("site", "model")}
    page.goto("/usage?window=1w")
    after = {label: kwh(label) for label in ("site", "model")}
    for label, table in (("site", "#energy-sites"), ("model", "#energy-models")):
        rows = page.locator(f"{table} tr[data-name]")
        shown = {
            rows.nth(i).get_attribute("data-name") or "": float(
                rows.nth(i).locator('[data-k="kwh"]').text_content() or ""
            )
            for i in range(rows.count())
        }
        assert set(shown) == set(after[label]) or set(shown) == set(before[label]), shown
        for name, value in shown.items():
            low, high = before[label].get(name, 0.0), after[label][name]
            assert low - 0.0005 <= value <= high + 0.0005, (label, name, low, value, high)
        assert rows.first.locator("svg.spark title").count() == 1
    team.post(f"/v1/jobs/{job_id}/cancel")
    page.context.close()


def test_the_device_grid_shows_each_partitioned_cards_layout(browser: Any, tmp_path: Path) -> None:
    """A node's cut cards each get a row: its instances in slice order, busy or free as the
    API's devices say (a job holds the only 4g.40gb)."""
    cluster = ROOT / "examples" / "cluster-partitions.yaml"
    with ServerProc(tmp_path / "data", cluster=cluster) as srv, srv.tenant_client("team") as team:
        hold = [JOB_PYTHON, "-c", "import time; time.sleep(600)"]
        r = team.post("/v1/jobs", json={"spec": "A100 mig=4g.40gb", "command": hold})
        assert r.status_code == 201, r.text
        with httpx.Client(base_url=srv.url, headers=srv.headers()) as admin:

            def instances() -> list[dict[str, Any]]:
                return [
                    d
                    for d in admin.get("/v1/devices", params={"node": "mig-a100"}).json()
                    if d["partition_of"] is not None
                ]

            held = until(lambda: [d for d in instances() if d["jobs"]], "the 4g.40gb instance held")
            assert [d["partition"] for d in held] == ["4g.40gb"]
            expected: dict[str, list[tuple[int, str]]] = {}
            for d in instances():
                words = f"{d['partition']}@{d['partition_start']}"
                state = "busy" if d["jobs"] else "free"
                expected.setdefault(d["partition_of"], []).append(
                    (d["partition_start"], f"{words} {state}")
                )
        page = sign_in(browser, srv.url, srv.admin_token)
        page.goto("/devices?site=beijing")
        node = page.locator('div.node[data-node="mig-a100"]')
        rows = node.locator("table.layouts tbody tr")
        expect(rows).to_have_count(len(expected))  # the uncut A100 has no row
        for card, cut in expected.items():
            row = node.locator(f'table.layouts tr[data-card="{card}"] td')
            expect(row).to_have_text(", ".join(text for _, text in sorted(cut)))
        card = held[0]["partition_of"]
        expect(node.locator(f'tr[data-card="{card}"] td')).to_have_text(
            "4g.40gb@0 busy, 2g.20gb@4 free, 1g.10gb@6 free"
        )
        page.context.close()


def test_the_overview_lists_each_sites_link_domains_as_the_api(browser: Any, pool: Pool) -> None:
    """The pool's third site names a link domain (conftest.py): the overview page lists it,
    and the unnamed rest of that site, with the nodes and cards /v1/fleet/overview gives, and
    no other site (they name none). Jobs of earlier tests may still free cards between the two
    reads, so a differing pair is read again a few times before it fails."""

    def given() -> dict[tuple[str, str], tuple[str, str, str]]:
        domains = pool.admin.get("/v1/fleet/overview").json()["domains"]
        return {
            (d["site"], d["name"] or ""): (
                d["name"] or "(no label)",
                f"{d['nodes']:,}",
                f"{d['devices_free']:,} / {d['devices_total']:,}",
            )
            for d in domains
        }

    def shown() -> dict[tuple[str, str], tuple[str, str, str]]:
        page.goto("/")
        rows = page.locator("#domains tbody tr")
        return {
            (row.get_attribute("data-site") or "", row.get_attribute("data-domain") or ""): (
                row.locator("th").text_content() or "",
                row.locator('[data-k="nodes"]').text_content() or "",
                row.locator('[data-k="devices"]').text_content() or "",
            )
            for row in rows.all()
        }

    api = given()
    assert {site for site, _ in api} == {"guangzhou"}, api
    assert any(name for _, name in api), api
    page = sign_in(browser, pool.url, pool.tokens["admin"])
    try:
        for _ in range(5):
            api, page_rows = given(), shown()
            if page_rows == api:
                break
        assert page_rows == api
    finally:
        page.context.close()
