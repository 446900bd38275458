"""Metering against the jobs' own timestamped events (issue 52): one record per attempt,
replica and card, advanced at each flush, continued after a restart, closed at the end; energy
split by share with the remainder charged to the pool. The plane runs on a hand-moved clock, so
every time below is exact."""

from __future__ import annotations

from typing import Any

import pytest
from server_kit import (
    BOTH_STORES,
    Server,
    heartbeat,
    job,
    node,
    reopen,
    report,
    row_counts,
    submit,
    tenant,
    two_tenants_ran,
)
from sqlalchemy import func, select

from xpupool.server.storage.usage import usage_records, usage_rollups, usage_totals
from xpupool.server.usage.meter import POOL

STORES = BOTH_STORES  # the records, rollups and totals through SQLite and PostgreSQL alike


def _records(server: Server) -> list[dict[str, Any]]:
    with server.plane.db.connect() as conn:
        t = usage_records
        rows = conn.execute(select(t).order_by(t.c.job_id, t.c.attempt, t.c.replica)).mappings()
        return [dict(r) for r in rows]


def _event_at(server: Server, job_id: int, state: str, nth: int = 0) -> float:
    return [e["at"] for e in job(server, job_id)["events"] if e["state"] == state][nth]


def _start(server: Server, token: str, spec: str = "A100:1") -> int:
    j = submit(server, token, spec)
    server.schedule()
    heartbeat(server, "n1")  # handed out
    heartbeat(server, "n1", [report(j["id"], 0, "running")])
    return int(j["id"])


def test_a_run_is_recorded_while_it_runs_and_closed_at_its_end(server: Server) -> None:
    node(server, "n1", count=1)
    a = tenant(server, "a")
    job_id = _start(server, a)
    server.clock.advance(100)
    server.plane.meter.flush(server.plane)
    (rec,) = _records(server)
    assert rec["ended_at"] is None and rec["seconds"] == 100.0  # visible while it runs
    server.clock.advance(50)
    heartbeat(server, "n1", [report(job_id, 0, "succeeded", 0)])
    server.clock.advance(30)  # the flush comes later; the end is when it was reported
    server.plane.meter.flush(server.plane)
    (rec,) = _records(server)
    ran = _event_at(server, job_id, "succeeded") - _event_at(server, job_id, "running")
    assert rec["seconds"] == ran == 150.0
    assert rec["ended_at"] == _event_at(server, job_id, "succeeded")
    assert (rec["tenant"], rec["share"], rec["memory_gib"]) == ("a", 1.0, 80.0)
    assert rec["device_seconds"] == 150.0 and rec["cu_seconds"] == 150.0 * rec["units"] > 0
    assert rec["gib_seconds"] == 80.0 * 150.0 and rec["energy_j"] > 0


def test_an_adopted_run_continues_its_record_and_a_retry_gets_its_own(server: Server) -> None:
    node(server, "n1", count=1)
    a = tenant(server, "a")
    job_id = _start(server, a)
    server.clock.advance(40)
    server.plane.meter.flush(server.plane)
    server.clock.advance(10)  # counted by no flush: the plane stops here
    server = reopen(server)
    server.clock.advance(20)
    for held in server.plane.held_jobs.values():
        held.dispatched = False
    heartbeat(server, "n1", [{**report(job_id, 0, "running"), "attempt": 1}])  # adopted
    server.plane.meter.flush(server.plane)
    (rec,) = _records(server)
    assert rec["seconds"] == 70.0 and rec["ended_at"] is None  # the same row, the gap counted
    server.clock.advance(5)
    lease = {**report(job_id, 0, "stopped"), "attempt": 1, "stop_cause": "lease_expired"}
    heartbeat(server, "n1", [lease])  # requeued: attempt 1 ends
    server.schedule()
    heartbeat(server, "n1")
    server.clock.advance(1)
    heartbeat(server, "n1", [{**report(job_id, 0, "running"), "attempt": 2}])
    server.clock.advance(9)
    server.plane.meter.flush(server.plane)
    first, second = _records(server)
    assert (first["attempt"], first["seconds"], second["attempt"]) == (1, 75.0, 2)
    assert first["ended_at"] == _event_at(server, job_id, "pending", 1)
    assert second["seconds"] == 9.0 and second["ended_at"] is None
    assert second["started_at"] == _event_at(server, job_id, "running", -1)


def test_a_preempted_or_lost_run_ends_when_its_devices_are_released(server: Server) -> None:
    node(server, "n1", count=1)
    a = tenant(server, "a")
    job_id = _start(server, a)
    server.clock.advance(12)
    r = server.client.post(f"/v1/jobs/{job_id}/cancel", headers=server.as_(a))
    assert r.status_code in (200, 202), r.text
    server.clock.advance(3)
    heartbeat(server, "n1", [report(job_id, 0, "stopped")])
    server.plane.meter.flush(server.plane)
    (rec,) = _records(server)
    assert rec["seconds"] == 15.0 and rec["ended_at"] == server.clock.now


def test_energy_of_a_shared_card_is_split_by_share_and_the_rest_is_the_pool(
    server: Server,
) -> None:
    node(server, "n1", count=1)
    a, b = tenant(server, "a"), tenant(server, "b")
    ja = submit(server, a, "A100:1 cores=25% mem=10Gi")["id"]
    jb = submit(server, b, "A100:1 cores=50% mem=10Gi")["id"]
    server.schedule()
    heartbeat(server, "n1")
    heartbeat(server, "n1", [report(ja, 0, "running"), report(jb, 0, "running")])
    server.plane.meter.flush(server.plane)  # the first flush opens the window
    metrics = [{"uuid": "n1-gpu0", "power_w": 200.0, "utilization_pct": 30.0}]
    body = {"node": "n1", "metrics": metrics, "replicas": []}
    assert server.client.post("/v1/agent/heartbeat", json=body, headers=server.admin).is_success
    server.clock.advance(10)
    server.plane.meter.flush(server.plane)
    energy = {r["tenant"]: r["energy_j"] for r in _records(server)}
    assert energy == {"a": pytest.approx(200 * 0.25 * 10), "b": pytest.approx(200 * 0.5 * 10)}
    with server.plane.db.connect() as conn:
        t = usage_totals
        pool = conn.execute(select(t.c.energy_j).where(t.c.tenant == POOL)).scalar_one()
        hours = conn.execute(
            select(usage_rollups.c.energy_j).where(usage_rollups.c.step == "hour")
        ).scalars()
        assert sum(hours) == pytest.approx(200 * 10)  # holders and pool: the card's samples
    assert pool == pytest.approx(200 * 0.25 * 10)


def test_a_tenant_reads_its_own_usage_and_the_admin_everyones(server: Server) -> None:
    a, _b = two_tenants_ran(server)
    params = {"by": "tenant,model", "step": "hour", "from": "0"}
    mine = server.client.get("/v1/usage", params=params, headers=server.as_(a)).json()
    assert {r["tenant"] for r in mine["rows"]} == {"a"}
    assert sum(r["device_seconds"] for r in mine["rows"]) == pytest.approx(7200)
    every = server.client.get("/v1/usage", params=params, headers=server.admin).json()
    seconds: dict[str, float] = {}
    for r in every["rows"]:
        seconds[r["tenant"]] = seconds.get(r["tenant"], 0.0) + r["device_seconds"]
    assert seconds == {"a": pytest.approx(7200), "b": pytest.approx(9000)}
    days = server.client.get(
        "/v1/usage", params={"step": "month", "from": "0"}, headers=server.admin
    ).json()
    assert sum(r["device_seconds"] for r in days["rows"]) == pytest.approx(16200)
    assert all(r["queue"] is None for r in days["rows"])  # not asked for: summed over


def test_bad_usage_queries_are_refused_naming_the_field(server: Server) -> None:
    a, _b = two_tenants_ran(server)
    before = row_counts(server)
    for params, field in [
        ({"by": "tenant,colour"}, "by"),
        ({"by": "tenant,tenant"}, "by"),
        ({"step": "week"}, "step"),
        ({"from": "yesterday"}, "from"),
        ({"to": "1e300"}, "to"),
        ({"from": "2000", "to": "1000"}, "from"),
        ({"step": "hour", "from": "0", "to": "1e8"}, "from"),  # more buckets than one answer holds
    ]:
        r = server.client.get("/v1/usage", params=params, headers=server.as_(a))
        assert r.status_code == 422 and r.json()["field"] == field, (params, r.text)
    for month in ("2026-13", "0000-01", "26-11"):
        r = server.client.get("/v1/usage/export", params={"month": month}, headers=server.admin)
        assert r.status_code == 422 and r.json()["field"] == "month", r.text
    assert row_counts(server) == before


def test_the_month_export_is_one_row_per_tenant_queue_site_model(server: Server) -> None:
    a, _b = two_tenants_ran(server)
    from datetime import UTC, datetime

    month = datetime.fromtimestamp(server.clock.now, UTC).strftime("%Y-%m")
    r = server.client.get("/v1/usage/export", params={"month": month}, headers=server.admin)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/csv")
    lines = r.text.splitlines()
    assert lines[0] == (
        "month,tenant,queue,site,model,device_hours,device_memory_gib_hours,"
        "compute_unit_hours,energy_kwh,cost"  # cost: empty until the admin sets prices
    )
    rows = {line.split(",")[1]: line.split(",") for line in lines[1:]}
    assert set(rows) == {"a", "b"}  # no flush watched a card partly idle: no pool row
    assert float(rows["a"][5]) == pytest.approx(2.0) and float(rows["b"][5]) == pytest.approx(2.5)
    assert rows["a"][-1] == ""
    mine = server.client.get("/v1/usage/export", params={"month": month}, headers=server.as_(a))
    assert [line.split(",")[1] for line in mine.text.splitlines()[1:]] == ["a"]


def test_counters_in_metrics_go_on_from_the_store_after_a_restart(server: Server) -> None:
    two_tenants_ran(server)

    def device_seconds(srv: Server) -> float:
        text = srv.client.get("/metrics", headers=srv.admin).text
        line = next(
            x
            for x in text.splitlines()
            if x.startswith("xpupool_device_seconds_total{") and 'tenant="b"' in x
        )
        return float(line.rsplit(" ", 1)[1])

    assert device_seconds(server) == pytest.approx(9000)
    server = reopen(server)
    assert device_seconds(server) == pytest.approx(9000)  # seeded, not zero
    paths = server.client.get("/openapi.json").json()["paths"]
    assert "/v1/usage" in paths and "/v1/usage/export" in paths


def test_usage_is_kept_its_own_retention_and_the_totals_for_ever(server: Server) -> None:
    two_tenants_ran(server)
    heartbeat(server, "n1", [report(2, 0, "succeeded", 0)])  # b's job ends too
    server.plane.meter.flush(server.plane)
    server.plane.meter.keep_s = 2 * 86400.0
    server.clock.advance(3 * 86400.0)  # the hourly sweep is due
    server.plane.meter.flush(server.plane)
    assert _records(server) == []  # ended more than the retention ago
    with server.plane.db.connect() as conn:
        steps = conn.execute(select(usage_rollups.c.step).distinct()).scalars().all()
        assert steps == ["month"]  # hours and days gone; the month is not over yet
        kept = conn.execute(select(func.sum(usage_totals.c.device_seconds))).scalar()
    assert kept == pytest.approx(16200)  # b's 9,000 s ran to its end, not further
    assert job(server, 1)["state"] == "succeeded"  # jobs keep their own retention


def test_a_run_the_plane_stopped_before_writing_is_recorded_from_its_start(
    server: Server,
) -> None:
    node(server, "n1", count=1)
    a = tenant(server, "a")
    job_id = _start(server, a)
    server.clock.advance(3)  # the plane stops before its next flush: nothing written yet
    server = reopen(server)
    server.clock.advance(2)
    for held in server.plane.held_jobs.values():
        held.dispatched = False
    heartbeat(server, "n1", [{**report(job_id, 0, "running"), "attempt": 1}])  # adopted
    server.plane.meter.flush(server.plane)
    (rec,) = _records(server)
    assert rec["started_at"] == _event_at(server, job_id, "running")
    assert rec["seconds"] == 5.0


def test_a_restarted_meter_adds_to_the_rows_the_last_one_wrote_in_the_same_hour(
    server: Server,
) -> None:
    """The rollup rows a bucket holds from before a restart are added to, flush after flush,
    never inserted again (the meter keeps which rows exist once it has read a bucket)."""
    node(server, "n1", count=1)
    a = tenant(server, "a")
    job_id = _start(server, a, "A100:1 cores=50% mem=10Gi")  # half the card: the pool's row too
    server.plane.meter.flush(server.plane)
    server.clock.advance(10)
    server.plane.meter.flush(server.plane)
    server = reopen(server)
    for held in server.plane.held_jobs.values():
        held.dispatched = False
    heartbeat(server, "n1", [{**report(job_id, 0, "running"), "attempt": 1}])  # adopted
    for _ in range(3):  # the first reads the hour's rows, the next two add to them
        server.clock.advance(10)
        server.plane.meter.flush(server.plane)
    with server.plane.db.connect() as conn:
        r = usage_rollups
        rows = conn.execute(select(r.c.tenant, r.c.device_seconds).where(r.c.step == "hour"))
        held = {str(row[0]): float(row[1]) for row in rows}
    assert set(held) == {"a", POOL}
    assert held["a"] == pytest.approx(0.5 * 40)  # the whole run, each second once


def test_a_jobs_view_gives_the_energy_its_records_metered(server: Server) -> None:
    """Issue 55: kWh per job in its view, from the metering records' joules (all its runs)."""
    node(server, "n1", count=1)
    a = tenant(server, "a")
    job_id = _start(server, a)
    assert job(server, job_id)["energy_kwh"] is None  # nothing metered yet
    server.clock.advance(3600)
    server.plane.meter.flush(server.plane)
    (rec,) = _records(server)
    assert job(server, job_id, a)["energy_kwh"] == pytest.approx(rec["energy_j"] / 3.6e6, abs=1e-6)
    assert job(server, job_id)["energy_kwh"] > 0


def test_rows_a_sweep_flush_did_not_touch_are_added_to_not_inserted_again(
    server: Server,
) -> None:
    """The hourly sweep forgets which rollup rows exist; a later flush must read the buckets it
    touches again rather than take this flush's rows for all of them (else a row another tenant
    wrote in the same day is inserted again and every flush fails on its unique key)."""
    node(server, "n1", count=2)
    a, b = tenant(server, "a"), tenant(server, "b")
    ja = _start(server, a)
    jb = _start(server, b)
    server.clock.advance(60)
    server.plane.meter.flush(server.plane)  # both tenants' rows in today's buckets
    heartbeat(server, "n1", [report(jb, 0, "succeeded", 0)])
    server.plane.meter.flush(server.plane)  # b's run ends; a's goes on
    server.clock.advance(3700)  # past the sweep's period: the next flush sweeps
    server.plane.meter.flush(server.plane)  # touches only a's rows (and the pool's)
    jb2 = _start(server, b)  # b again, the same day
    server.clock.advance(60)
    server.plane.meter.flush(server.plane)
    with server.plane.db.connect() as conn:
        r = usage_rollups
        days = conn.execute(
            select(r.c.tenant, func.sum(r.c.device_seconds))
            .where(r.c.step == "day", r.c.tenant.in_(["a", "b"]))
            .group_by(r.c.tenant)
        ).all()
    assert dict(days) == {"a": 60.0 + 3700.0 + 60.0, "b": 60.0 + 60.0}, (ja, jb2)


def test_a_restarted_plane_charges_the_pool_its_share_of_the_downtime(server: Server) -> None:
    """Holders and pool add up to the card's energy across a restart: the first flush after it
    advances the run from where it was last written, the time the plane was down included, and
    charges the pool the rest of the card over the same stretch at the same watts, in the hours
    it fell in; a second restart at once counts nothing twice."""
    node(server, "n1", count=1)
    a = tenant(server, "a")
    job_id = _start(server, a, "A100:1 cores=25% mem=10Gi")
    server.plane.meter.flush(server.plane)  # the window opens
    server.clock.advance(10)
    server.plane.meter.flush(server.plane)
    for _ in range(2):  # down across an hour's end, then restarted again at once
        server = reopen(server)
        for held in server.plane.held_jobs.values():
            held.dispatched = False
        heartbeat(server, "n1", [{**report(job_id, 0, "running"), "attempt": 1}])  # adopted
        server.clock.advance(4000)
        server.plane.meter.flush(server.plane)
    server.clock.advance(5)
    server.plane.meter.flush(server.plane)
    (rec,) = _records(server)
    watched = 10 + 4000 + 4000 + 5.0
    assert rec["seconds"] == watched
    watts = rec["energy_j"] / rec["device_seconds"]  # the catalog's, unread: one figure
    with server.plane.db.connect() as conn:
        r, t = usage_rollups, usage_totals
        total = conn.execute(select(func.sum(t.c.energy_j))).scalar_one()
        pool = conn.execute(select(t.c.energy_j).where(t.c.tenant == POOL)).scalar_one()
        rows = conn.execute(select(r.c.step, r.c.bucket, r.c.tenant, r.c.energy_j)).all()
    assert total == pytest.approx(watts * watched)  # holders and pool: the card's energy
    assert pool == pytest.approx(0.75 * watts * watched)
    start = server.clock.now - watched
    hours: dict[tuple[float, str], float] = {}
    for step, bucket, who, energy in rows:
        if step == "hour":
            hours[(bucket, who)] = energy
    for hour in {b for b, _w in hours}:  # each hour's rows: the card's watts over its part
        inside = min(hour + 3600, server.clock.now) - max(hour, start)
        assert hours[(hour, "a")] == pytest.approx(0.25 * watts * inside), hour
        assert hours[(hour, POOL)] == pytest.approx(0.75 * watts * inside), hour
    assert len(hours) == 2 * 4  # four hours touched, each with the tenant's row and the pool's
    for step in ("day", "month"):
        assert sum(e for s, _b, _w, e in rows if s == step) == pytest.approx(total), step


def test_a_crash_mid_flush_loses_at_most_an_interval_and_counts_nothing_twice(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A flush whose last write fails writes nothing (one transaction); the plane then stops
    and starts again: its run goes on from the last flush that was written, each second once,
    and holders and pool add up to the card's energy."""
    node(server, "n1", count=1)
    a = tenant(server, "a")
    job_id = _start(server, a, "A100:1 cores=50% mem=10Gi")
    server.plane.meter.flush(server.plane)
    server.clock.advance(100)
    server.plane.meter.flush(server.plane)
    before = _records(server)
    server.clock.advance(100)

    def fail(*_args: Any) -> None:
        raise RuntimeError("the store went away")

    monkeypatch.setattr(server.plane.meter, "_write_sums", fail)
    with pytest.raises(RuntimeError):
        server.plane.meter.flush(server.plane)
    assert _records(server) == before  # the records' writes went with the rest
    server = reopen(server)  # the crash
    for held in server.plane.held_jobs.values():
        held.dispatched = False
    server.plane.meter.flush(server.plane)  # a server's first look, before its agents report
    server.clock.advance(50)
    heartbeat(server, "n1", [{**report(job_id, 0, "running"), "attempt": 1}])
    server.plane.meter.flush(server.plane)
    (rec,) = _records(server)
    assert rec["seconds"] == 250.0 and rec["device_seconds"] == 125.0
    watts = rec["energy_j"] / rec["device_seconds"]
    with server.plane.db.connect() as conn:
        t, r = usage_totals, usage_rollups
        total = conn.execute(select(func.sum(t.c.energy_j))).scalar_one()
        hours = conn.execute(select(func.sum(r.c.energy_j)).where(r.c.step == "hour")).scalar()
    assert total == pytest.approx(watts * 250.0) and hours == pytest.approx(total)
