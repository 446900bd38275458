"""Prices and budgets (issue 52): cost in the usage answers and the month's CSV at the admin's
price tables, each in force from the time it takes effect (a change mid-hour priced in two parts),
an older store's single table moved into the history, and each budget policy applied at
admission, with its reason in the job's events. A real app on both stores and a hand-moved
clock: every figure below is exact."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import pytest
from server_kit import (
    BOTH_STORES,
    Server,
    heartbeat,
    job,
    node,
    report,
    row_counts,
    submit,
    tenant,
    two_tenants_ran,
)
from sqlalchemy import insert, select, text

from xpupool.server.storage import meta
from xpupool.server.storage.billing import usage_price_tables, usage_prices
from xpupool.server.storage.usage import usage_rollups

STORES = BOTH_STORES  # the price table and the budgets through SQLite and PostgreSQL alike

PRICES = {
    "currency": "EUR",
    "models": [{"model": "A100-SXM4-80GB", "per_card_hour": 2.0}],  # the catalog's name
}


def _put(server: Server, path: str, body: dict[str, Any], token: str | None = None) -> Any:
    headers = server.admin if token is None else server.as_(token)
    return server.client.put(path, json=body, headers=headers)


def test_usage_and_the_month_csv_are_priced_by_the_admins_table(server: Server) -> None:
    r = _put(server, "/v1/prices", PRICES | {"per_kwh": 0.25})
    assert r.status_code == 200, r.text
    a, _b = two_tenants_ran(server)
    params = {"by": "tenant", "step": "month", "from": "0"}
    r = _put(server, "/v1/prices", PRICES, a)
    assert r.status_code == 403, r.text  # the admin's only
    answer = server.client.get("/v1/usage", params=params, headers=server.admin).json()
    assert answer["currency"] == "EUR"
    rows = {r["tenant"]: r for r in answer["rows"]}
    for name, hours in (("a", 2.0), ("b", 2.5)):
        kwh = rows[name]["energy_j"] / 3.6e6
        assert rows[name]["cost"] == pytest.approx(hours * 2.0 + kwh * 0.25)
    mine = server.client.get("/v1/usage", params=params, headers=server.as_(a)).json()
    assert [r["tenant"] for r in mine["rows"]] == ["a"]
    month = datetime.fromtimestamp(server.clock.now, UTC).strftime("%Y-%m")
    csv = server.client.get("/v1/usage/export", params={"month": month}, headers=server.admin)
    lines = csv.text.splitlines()
    assert lines[0].endswith(",energy_kwh,cost")
    cost = {line.split(",")[1]: float(line.split(",")[-1]) for line in lines[1:]}
    assert cost["a"] == pytest.approx(rows["a"]["cost"], abs=1e-6)
    assert server.client.get("/v1/prices", headers=server.as_(a)).json()["currency"] == "EUR"


def test_a_bad_price_table_or_budget_is_refused_naming_the_field(server: Server) -> None:
    a = tenant(server, "a")
    before = row_counts(server)
    for body, field in [
        (PRICES | {"per_kwh": -1}, "per_kwh"),
        ({"models": [{"model": "A100-SXM4-80GB", "per_card_hour": "x"}]}, "per_card_hour"),
        (PRICES | {"colour": "red"}, "colour"),
    ]:
        r = _put(server, "/v1/prices", body)
        assert r.status_code == 422 and field in r.json()["field"], r.text
    for body, field in [
        ({"period": "year", "amount": 1, "policy": "warn"}, "period"),
        ({"period": "day", "amount": -1, "policy": "warn"}, "amount"),
        ({"period": "day", "amount": 1, "policy": "shout"}, "policy"),
    ]:
        r = _put(server, "/v1/tenants/a/budget", body)
        assert r.status_code == 422 and field in r.json()["field"], r.text
    r = _put(server, "/v1/tenants/nobody/budget", {"period": "day", "amount": 1, "policy": "warn"})
    assert r.status_code == 404, r.text
    r = _put(server, "/v1/tenants/a/budget", {"period": "day", "amount": 1, "policy": "warn"}, a)
    assert r.status_code == 403, r.text
    assert row_counts(server) == before


def test_usage_recorded_before_the_first_table_stays_unpriced(server: Server) -> None:
    two_tenants_ran(server)
    params = {"by": "tenant", "step": "month", "from": "0"}
    before = server.client.get("/v1/usage", params=params, headers=server.admin).json()
    assert before["currency"] is None and all(r["cost"] is None for r in before["rows"])
    assert _put(server, "/v1/prices", PRICES).status_code == 200
    server.clock.advance(3600)  # b runs on one more hour, now priced
    server.plane.meter.flush(server.plane)
    answer = server.client.get("/v1/usage", params=params, headers=server.admin).json()
    cost = {r["tenant"]: r["cost"] for r in answer["rows"]}
    assert answer["currency"] == "EUR"
    assert cost["a"] == 0.0 and cost["b"] == pytest.approx(2.0)  # 1 of b's 3.5 h


def test_a_price_change_mid_hour_is_priced_in_two_parts(server: Server) -> None:
    assert _put(server, "/v1/prices", PRICES).status_code == 200
    node(server, "n1", count=1)
    a = tenant(server, "a")
    ja = submit(server, a, "A100:1")["id"]
    server.schedule()
    heartbeat(server, "n1")
    heartbeat(server, "n1", [report(ja, 0, "running")])
    began = server.clock.now
    hour = (began // 3600 + 1) * 3600  # the next whole hour
    server.clock.advance(hour - began)
    server.plane.meter.flush(server.plane)
    later = PRICES | {"models": [{"model": "A100-SXM4-80GB", "per_card_hour": 6.0}]}
    r = server.client.put(
        "/v1/prices", params={"at": str(hour + 1800)}, json=later, headers=server.admin
    )
    assert r.status_code == 200 and r.json()["effective_at"] == hour + 1800, r.text
    for at, price in ((hour + 1799, 2.0), (hour + 1800, 6.0)):
        found = server.client.get("/v1/prices", params={"at": str(at)}, headers=server.as_(a))
        assert found.json()["models"][0]["per_card_hour"] == price, (at, found.text)
    history = server.client.get("/v1/prices/history", headers=server.as_(a)).json()["tables"]
    assert [t["models"][0]["per_card_hour"] for t in history] == [2.0, 6.0]
    server.clock.advance(3600)  # one flush over the whole hour, across the change
    server.plane.meter.flush(server.plane)
    params = {"by": "tenant", "step": "hour", "from": str(hour), "to": str(hour + 3600)}
    rows = server.client.get("/v1/usage", params=params, headers=server.admin).json()["rows"]
    assert [(r["tenant"], r["device_seconds"]) for r in rows] == [("a", pytest.approx(3600))]
    assert rows[0]["cost"] == pytest.approx(0.5 * 2.0 + 0.5 * 6.0)
    budget = {"period": "day", "amount": 100.0, "policy": "warn"}
    assert _put(server, "/v1/tenants/a/budget", budget).status_code == 200
    spent = server.client.get("/v1/tenants/a/budget", headers=server.admin).json()["spent"]
    assert spent == pytest.approx((hour - began) / 3600 * 2.0 + 4.0)  # the same prices
    before = row_counts(server)
    r = server.client.put("/v1/prices", params={"at": str(hour)}, json=later, headers=server.admin)
    assert r.status_code == 422 and r.json()["field"] == "at", r.text  # priced already
    assert row_counts(server) == before
    assert len(server.client.get("/v1/prices/history", headers=server.admin).json()["tables"]) == 2


def test_an_older_stores_single_table_prices_what_it_recorded(store_url: str) -> None:
    db = meta.connect(store_url)
    try:
        with db.begin() as conn:  # a store of the release before price history
            conn.execute(text('ALTER TABLE "usage_rollups" DROP COLUMN "cost"'))
            conn.execute(insert(usage_prices).values(name="prices", prices=PRICES, updated_at=5.0))
            row = {"step": "hour", "bucket": 3600.0, "tenant": "a", "queue": "a", "site": ""}
            sums = {"gib_seconds": 0.0, "cu_seconds": 0.0, "energy_j": 0.0}
            conn.execute(
                insert(usage_rollups),
                [
                    row | sums | {"model": "NVIDIA A100-SXM4-80GB", "device_seconds": 7200.0},
                    row | sums | {"model": "unpriced", "device_seconds": 3600.0},
                ],
            )
    finally:
        db.dispose()
    db = meta.connect(store_url)  # what the next start does
    try:
        with db.connect() as conn:
            tables = conn.execute(select(usage_price_tables)).mappings().all()
            cost = dict(conn.execute(select(usage_rollups.c.model, usage_rollups.c.cost)).all())
            left = conn.execute(select(usage_prices)).all()
        assert [(t["effective_at"], t["prices"]) for t in tables] == [(0.0, PRICES)]
        assert cost == {"NVIDIA A100-SXM4-80GB": pytest.approx(4.0), "unpriced": 0.0}
        assert left == []
    finally:
        db.dispose()
    db = meta.connect(store_url)  # and a third start moves nothing again
    try:
        with db.connect() as conn:
            assert len(conn.execute(select(usage_price_tables)).all()) == 1
    finally:
        db.dispose()


def test_a_refusing_budget_refuses_new_jobs_naming_it_and_changes_nothing(server: Server) -> None:
    assert _put(server, "/v1/prices", PRICES).status_code == 200
    a, b = two_tenants_ran(server)
    budget = {"period": "month", "amount": 3.0, "policy": "refuse"}
    assert _put(server, "/v1/tenants/a/budget", budget).status_code == 200
    mine = server.client.get("/v1/tenants/a/budget", headers=server.as_(a)).json()
    assert (mine["spent"], mine["exceeded"], mine["currency"]) == (pytest.approx(4.0), True, "EUR")
    assert server.client.get("/v1/tenants/a/budget", headers=server.as_(b)).status_code == 404
    before = row_counts(server)
    r = server.client.post("/v1/jobs", json={"command": ["true"]}, headers=server.as_(a))
    assert r.status_code == 403, r.text
    reason = r.json()["reason"]
    assert r.json()["field"] == "tenant" and "month budget" in reason, reason
    assert "4.00 EUR" in reason and "3.00 EUR" in reason, reason
    assert row_counts(server) == before
    submit(server, b, "A100:1")  # another tenant's jobs are not its budget's business
    budget["amount"] = 10.0  # the admin raises it: admitted again
    assert _put(server, "/v1/tenants/a/budget", budget).status_code == 200
    submit(server, a, "A100:1")


def test_lower_priority_and_warn_admit_with_an_event_and_a_count(server: Server) -> None:
    assert _put(server, "/v1/prices", PRICES).status_code == 200
    a, b = two_tenants_ran(server)
    lower = {"period": "day", "amount": 1.0, "policy": "lower-priority", "lowered_priority": -5}
    assert _put(server, "/v1/tenants/a/budget", lower).status_code == 200
    ja = submit(server, a, "A100:1")
    assert ja["priority"] == -5
    notes = [e["reason"] for e in job(server, ja["id"])["events"]]
    assert any("priority 0 lowered to -5" in n and "day budget" in n for n in notes), notes
    warn = {"period": "week", "amount": 5.0, "policy": "warn"}
    assert _put(server, "/v1/tenants/b/budget", warn).status_code == 200
    jb = submit(server, b, "A100:1")
    assert jb["priority"] == 0
    notes = [e["reason"] for e in job(server, jb["id"])["events"]]
    assert any("over budget" in n and "5.00 EUR of its week budget" in n for n in notes), notes
    text = server.client.get("/metrics", headers=server.admin).text
    assert 'xpupool_budget_exceeded_jobs_total{policy="warn",tenant="b"} 1.0' in text
    assert 'xpupool_budget_exceeded_jobs_total{policy="lower-priority",tenant="a"} 1.0' in text


def test_spend_moves_at_a_flush_and_a_new_period_starts_from_nothing(server: Server) -> None:
    assert _put(server, "/v1/prices", PRICES).status_code == 200
    a, _b = two_tenants_ran(server)
    budget = {"period": "day", "amount": 100.0, "policy": "refuse"}
    assert _put(server, "/v1/tenants/b/budget", budget).status_code == 200

    def spent() -> float:
        return float(
            server.client.get("/v1/tenants/b/budget", headers=server.admin).json()["spent"]
        )

    first = spent()
    server.clock.advance(3600)
    assert spent() == first  # b still runs: counted at the next flush
    server.plane.meter.flush(server.plane)
    assert spent() > first
    view = server.client.get("/v1/tenants/b/budget", headers=server.admin).json()
    server.clock.advance(view["period_end"] + 1 - server.clock.now)  # the next day
    heartbeat(server, "n1", [report(2, 0, "succeeded", 0)])
    server.plane.meter.flush(server.plane)
    after = server.client.get("/v1/tenants/b/budget", headers=server.admin).json()
    assert after["period_start"] == view["period_end"]
    assert after["spent"] < view["spent"]
    assert server.client.delete("/v1/tenants/b/budget", headers=server.as_(a)).status_code == 403
    assert server.client.delete("/v1/tenants/b/budget", headers=server.admin).status_code == 204
    assert server.client.get("/v1/tenants/b/budget", headers=server.admin).status_code == 404


def test_the_usage_page_shows_a_tenant_its_own_rows_cost_and_budget(server: Server) -> None:
    assert _put(server, "/v1/prices", PRICES).status_code == 200
    a, _b = two_tenants_ran(server)
    budget = {"period": "month", "amount": 3.0, "policy": "warn"}
    assert _put(server, "/v1/tenants/a/budget", budget).status_code == 200
    here = {"Origin": "http://testserver"}
    server.client.follow_redirects = False
    assert server.client.post("/signin", data={"token": a}, headers=here).status_code == 303
    html = server.client.get("/usage").text
    assert re.findall(r'data-tenant="([^"]+)"', html) == ["a"]  # its own only
    hours = re.search(r'data-tenant="a".*?data-k="hours">([\d.]+)<', html, re.S)
    cost = re.search(r'data-tenant="a".*?data-k="cost">([\d.]+)<', html, re.S)
    assert hours is not None and cost is not None
    assert (hours.group(1), cost.group(1)) == ("2.00", "4.00")
    assert re.search(r'data-k="spent">4.00<', html) and "The budget is spent." in html
    assert server.client.get("/usage", params={"window": "1y"}).status_code == 422
    server.client.post("/signout", data={}, headers=here)
    assert (
        server.client.post("/signin", data={"token": server.admin_token}, headers=here).status_code
        == 303
    )
    every = server.client.get("/usage", params={"window": "1d"}).text
    assert re.findall(r'data-tenant="([^"]+)"', every) == ["b", "a"]  # most card-hours first
    assert 'data-model="NVIDIA A100-SXM4-80GB"' in every
