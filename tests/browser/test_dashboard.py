"""The dashboard end to end in Chromium: sign-in, the fleet figures against the API's, the pages a
tenant and the admin see, and the protections (escaping, CSRF, the token kept out of the page)."""

from __future__ import annotations

from typing import Any

from conftest import Pool, axe_violations, dom_nodes, sign_in


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
    page = sign_in(browser, pool.url, pool.tokens["admin"])
    devices = pool.admin.get("/v1/devices").json()
    sites = sorted({d["site"] for d in devices})
    assert len(sites) == 3, sites  # beijing, shanghai and the agent's guangzhou
    for site in sites:
        mine = [d for d in devices if d["site"] == site]
        allocated = sum(
            1 for d in mine if d["allocated_memory_mib"] or d["allocated_core_permille"]
        )
        row = page.locator(f'#sites tr[data-site="{site}"]')
        assert row.locator('[data-k="devices_total"]').text_content() == f"{len(mine):,}"
        assert row.locator('[data-k="devices_allocated"]').text_content() == f"{allocated:,}"
    assert page.text_content("#total-devices") == f"{len(devices):,}"
    assert axe_violations(page, axe_source) == []
    assert dom_nodes(page) <= 5000
    page.context.close()


def test_axe_reports_what_it_should(browser: Any, axe_source: str) -> None:
    """The accessibility check can fail: an image without alt text is a critical violation."""
    page = browser.new_page()
    page.set_content('<html lang="en"><title>t</title><img src="data:,">')
    assert [v["id"] for v in axe_violations(page, axe_source)] == ["image-alt"]
    page.close()
