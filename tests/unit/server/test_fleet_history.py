"""The fleet history (``server/history.py``) on an in-process plane with a fake clock: the coarse
tiers hold the means of the raw samples in their buckets, every tier is pruned in the writing
transaction so the table stays bounded however many samples are taken, a bad query is a 400
naming its field, and the last sample is in ``/metrics``."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families
from server_kit import Server, node, submit, tenant
from sqlalchemy import func, select

from xpupool.cli import main
from xpupool.server.history import DEFAULT_TIERS, MAX_KEYS, METRICS, FleetHistory, Tier
from xpupool.server.live_metrics import LiveMetrics
from xpupool.server.storage.history import SERIES, fleet_history


def rows(srv: Server, tier: str, site: str = "", model: str = "") -> list[dict[str, Any]]:
    t = fleet_history
    query = select(t).where(t.c.tier == tier, t.c.site == site, t.c.model == model).order_by(t.c.t)
    with srv.plane.db.connect() as conn:
        return [dict(r) for r in conn.execute(query).mappings()]


def row_count(srv: Server) -> int:
    with srv.plane.db.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(fleet_history)).scalar_one())


def history(srv: Server, **params: str) -> dict[str, Any]:
    r = srv.client.get("/v1/fleet/history", params=params, headers=srv.admin)
    assert r.status_code == 200, r.text
    return dict(r.json())


def busy(srv: Server, node_name: str, cards: int, util: float) -> None:
    readings = [{"uuid": f"{node_name}-gpu{i}", "utilization_pct": util} for i in range(cards)]
    body = {"node": node_name, "metrics": readings}
    assert srv.client.post("/v1/agent/heartbeat", json=body, headers=srv.admin).status_code == 200


@pytest.mark.slow
def test_coarse_tiers_hold_the_means_of_the_raw_samples_in_their_buckets(server: Server) -> None:
    node(server, "n1", count=4)
    sampler = FleetHistory(server.plane, interval_s=60)
    server.clock.now = 3600.0 * 1000  # on an hour's edge: the buckets are easy to name
    start = server.clock.now
    utils = []
    for k in range(90):  # an hour and a half, one sample a minute
        util = float(k % 7) * 10
        busy(server, "n1", 4, util)
        utils.append(util)
        sampler.sample(server.clock.now)
        server.clock.advance(60)
    raw = rows(server, "raw")
    assert [r["util_pct_mean"] for r in raw] == utils
    five = rows(server, "5m")
    assert [r["t"] for r in five] == [start + 300 * b for b in range(18)]
    for b, r in enumerate(five):
        assert r["samples"] == 5
        assert r["util_pct_mean"] == pytest.approx(sum(utils[5 * b : 5 * b + 5]) / 5)
    hourly = rows(server, "1h")
    assert [(r["t"], r["samples"]) for r in hourly] == [(start, 60), (start + 3600, 30)]
    assert hourly[1]["util_pct_mean"] == pytest.approx(sum(utils[60:]) / 30)
    assert {r["devices_total"] for r in hourly} == {4.0}
    day = history(server, window="1d")
    assert day["step_s"] == 300
    util_series = next(x for x in day["series"] if x["name"] == "util_pct_mean")
    assert [p[1] for p in util_series["points"]] == pytest.approx(
        [r["util_pct_mean"] for r in five]
    )
    hour = history(server, window="1h")
    assert hour["step_s"] == server.plane.history_interval_s
    points = next(x for x in hour["series"] if x["name"] == "util_pct_mean")["points"]
    assert len(points) == 60 and points[-1][1] == utils[-1]


@pytest.mark.slow
def test_the_table_stays_bounded_after_many_samples(server: Server) -> None:
    node(server, "n1", count=2)
    node(server, "n2", count=2, model="NVIDIA L20", memory_mib=49152)
    tiers = (Tier("raw", 0.0, 600.0), Tier("5m", 300.0, 3600.0), Tier("1h", 600.0, 7200.0))
    sampler = FleetHistory(server.plane, interval_s=30, tiers=tiers)
    keys = 6  # the fleet, the site, two models, and the site's two (site, model) pairs
    bound = keys * sum(math.ceil(t.keep_s / (t.step_s or 30)) + 1 for t in tiers)
    most = 0
    for _ in range(2000):  # 16 hours
        sampler.sample(server.clock.now)
        server.clock.advance(30)
        most = max(most, row_count(server))
    assert most <= bound
    oldest = {r["tier"]: r["t"] for r in _oldest(server)}
    now = server.clock.now - 30
    for t in tiers:
        assert oldest[t.name] >= now - t.keep_s - t.step_s


def _oldest(srv: Server) -> list[dict[str, Any]]:
    t = fleet_history
    query = select(t.c.tier, func.min(t.c.t).label("t")).group_by(t.c.tier)
    with srv.plane.db.connect() as conn:
        return [dict(r) for r in conn.execute(query).mappings()]


@pytest.mark.slow
def test_series_per_site_model_and_fleet(server: Server) -> None:
    node(server, "n1", count=2)
    a = tenant(server, "a")
    submit(server, a, "A100:1")
    server.schedule()
    submit(server, a, "A100:2")  # one card left: waits
    server.schedule()
    FleetHistory(server.plane).sample(server.clock.now)
    fleet = {x["name"]: x for x in history(server)["series"]}
    assert fleet["devices_allocated"]["points"][-1][1] == 1.0
    assert fleet["pending"]["points"][-1][1] == 1.0
    assert fleet["stranded_memory_mib"]["points"][-1][1] == 0.0
    per_model = {x["name"] for x in history(server, model="A100-SXM4-80GB")["series"]}
    assert "pending" not in per_model and "stranded_memory_mib" not in per_model
    per_site = {x["name"] for x in history(server, site="default")["series"]}
    assert "stranded_memory_mib" in per_site and "pending" not in per_site


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"window": "2h"}, "window"),
        ({"window": ""}, "window"),
        ({"site": "atlantis"}, "site"),
        ({"site": "x" * 5000}, "site"),
        ({"model": "H100"}, "model"),
        ({"window": "1w", "model": ""}, "model"),
    ],
)
@pytest.mark.slow
def test_bad_query_is_400_naming_the_field(
    server: Server, params: dict[str, str], field: str
) -> None:
    node(server, "n1", count=1)
    FleetHistory(server.plane).sample(server.clock.now)
    r = server.client.get("/v1/fleet/history", params=params, headers=server.admin)
    assert r.status_code == 400, r.text
    assert r.json()["field"] == field


def test_history_needs_a_signed_in_user(server: Server) -> None:
    assert server.client.get("/v1/fleet/history").status_code == 401
    assert server.client.get("/v1/fleet/overview").status_code == 401


@pytest.mark.slow
def test_the_last_sample_is_in_metrics(server: Server) -> None:
    node(server, "n1", count=2)
    busy(server, "n1", 2, 50.0)
    sampler = FleetHistory(server.plane)
    sampler.sample(server.clock.now)
    server.clock.advance(60)
    busy(server, "n1", 1, 0.0)
    sampler.sample(server.clock.now)
    text = server.client.get("/metrics", headers=server.admin).text
    found = {
        (m.name, s.labels["site"], s.labels["model"]): s.value
        for m in text_string_to_metric_families(text)
        if m.name.startswith("xpupool_fleet_")
        for s in m.samples
    }
    assert found[("xpupool_fleet_devices", "", "")] == 2
    assert found[("xpupool_fleet_devices_busy", "default", "A100-SXM4-80GB")] == 1  # the last
    assert found[("xpupool_fleet_utilization_ratio", "", "")] == pytest.approx(0.25)
    assert ("xpupool_fleet_pending_jobs", "", "") in found


def test_maybe_sample_waits_out_the_interval(server: Server) -> None:
    node(server, "n1", count=1)
    sampler = FleetHistory(server.plane, interval_s=60)
    assert sampler.maybe_sample() and not sampler.maybe_sample()
    server.clock.advance(59)
    assert not sampler.maybe_sample()
    server.clock.advance(1)
    assert sampler.maybe_sample()
    assert len(rows(server, "raw")) == 2


def test_tiers_that_raw_samples_cannot_fill_are_refused(server: Server) -> None:
    with pytest.raises(ValueError, match="1h buckets"):
        FleetHistory(server.plane, tiers=(Tier("raw", 0, 600), Tier("1h", 3600, 86400)))
    assert FleetHistory(server.plane).tiers == DEFAULT_TIERS
    assert MAX_KEYS >= 1


def test_live_metrics_ring_keeps_the_last_readings_spaced_out() -> None:
    live = LiveMetrics(ring=3, step_s=10)
    for k in range(7):
        live.record("u1", 100.0 + 5 * k, float(k), None, 10.0, None)  # every 5 s: every other kept
    recent = live.recent("u1")
    assert [r.t for r in recent] == [110.0, 120.0, 130.0]
    assert [r.util_pct for r in recent] == [2.0, 4.0, 6.0]
    assert recent[0].memory_mib_used is None and recent[0].power_w == 10.0
    assert live.recent("nope") == []
    live.record("u2", 100.0, 1.0, 1.0, 1.0, 1.0)
    assert live.keep_only(["u2"]) == 1 and len(live) == 1
    assert live.recent("u1") == [] and live.recent("u2")[0].temp_c == 1.0


@pytest.mark.parametrize("bad", ["soon", "0s", "-5s"])
def test_up_refuses_a_bad_history_interval(bad: str, tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["up", "--data", str(tmp_path), "--history-interval", bad])
    assert result.exit_code == 2, result.output
    assert "--history-interval" in result.output
    assert not any(tmp_path.iterdir())  # refused before anything was written


def test_the_doc_names_every_series_and_gauge() -> None:
    root = Path(__file__).resolve().parents[3]
    page = (root / "docs" / "fleet-overview.md").read_text()
    metrics_table = (root / "docs" / "agent.md").read_text()
    for series in SERIES:
        assert f"`{series}" in page, series
    for _, gauge, _, _ in METRICS:
        assert gauge in page and gauge in metrics_table, gauge


def test_implausible_readings_are_kept_as_unread() -> None:
    live = LiveMetrics()
    live.record("u1", 100.0, 1e308, -5.0, 1e308, 20.0)
    r = live.recent("u1")[0]
    assert (r.util_pct, r.memory_mib_used, r.power_w, r.temp_c) == (None, None, None, 20.0)
