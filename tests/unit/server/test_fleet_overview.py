"""The fleet overview (``GET /v1/fleet/overview``) and a card's detail (``GET /v1/devices/{uuid}``)
on an in-process plane: its numbers are those ``/v1/devices`` and ``/v1/jobs`` give, a tenant sees
only its own jobs' reasons and counts, and stranded capacity appears for a fragment no job shape
fits and goes once a pending job fits it."""

from __future__ import annotations

from typing import Any

import pytest
from server_kit import Server, devices, node, queue, submit, tenant

from xpupool.server.services.overview import BUSY_UTIL_PCT, Waiting


def overview(srv: Server, token: str | None = None) -> dict[str, Any]:
    r = srv.client.get("/v1/fleet/overview", headers=srv.as_(token or srv.admin_token))
    assert r.status_code == 200, r.text
    return dict(r.json())


def jobs(srv: Server, token: str | None = None) -> list[dict[str, Any]]:
    r = srv.client.get(
        "/v1/jobs", params={"limit": 1000}, headers=srv.as_(token or srv.admin_token)
    )
    assert r.status_code == 200, r.text
    return list(r.json())


def metrics(srv: Server, node_name: str, readings: list[dict[str, Any]]) -> None:
    body = {"node": node_name, "metrics": readings}
    r = srv.client.post("/v1/agent/heartbeat", json=body, headers=srv.admin)
    assert r.status_code == 200, r.text


def quota(nominal: int) -> dict[str, Any]:
    return {"flavor": "nvidia", "resource": "devices", "nominal": nominal}


@pytest.mark.slow
def test_overview_equals_devices_and_jobs(server: Server) -> None:
    node(server, "n1", count=4)
    node(server, "n2", count=2, model="NVIDIA L20", memory_mib=49152)
    a = tenant(server, "a")
    submit(server, a, "A100:2")
    submit(server, a, "A100:1 cores=30%")
    submit(server, a, "L20:1 mem=8Gi")
    server.schedule()
    submit(server, a, "A100:4")  # waits: one card is left whole
    server.schedule()
    server.client.post("/v1/devices/n2-gpu1/cordon", headers=server.admin)
    metrics(
        server,
        "n1",
        [
            {"uuid": "n1-gpu0", "utilization_pct": 80.0, "memory_used_mib": 4000, "power_w": 300},
            {"uuid": "n1-gpu1", "utilization_pct": BUSY_UTIL_PCT / 2, "memory_used_mib": 100},
            {"uuid": "n1-gpu2", "power_w": 50.5},
        ],
    )
    seen = overview(server)
    listed = devices(server)
    groups = {(g["site"], g["device_model"]): g for g in seen["groups"]}
    assert set(groups) == {("default", d["canonical_model"]) for d in listed}
    for (_, model), g in groups.items():
        cards = [d for d in listed if d["canonical_model"] == model]
        m = [d["metrics"] for d in cards if d["metrics"] is not None]
        assert g["devices_total"] == len(cards)
        assert g["devices_allocated"] == sum(1 for d in cards if d["jobs"])
        assert g["memory_mib_total"] == sum(d["memory_mib"] for d in cards)
        assert g["memory_mib_allocated"] == sum(d["allocated_memory_mib"] for d in cards)
        assert g["core_pct_allocated"] == sum(d["allocated_core_permille"] for d in cards) / 10
        assert g["core_pct_total"] == 100 * len(cards)
        assert g["cordoned"] == sum(1 for d in cards if d["cordoned"])
        assert g["unhealthy"] == sum(1 for d in cards if not d["healthy"])
        util = [x["utilization_pct"] for x in m if x["utilization_pct"] is not None]
        assert g["devices_busy"] == sum(1 for u in util if u >= BUSY_UTIL_PCT)
        assert g["core_pct_used"] == (sum(util) if util else None)
        used = [x["memory_used_mib"] for x in m if x["memory_used_mib"] is not None]
        assert g["memory_mib_used"] == (sum(used) if used else None)
        power = [x["power_w"] for x in m if x["power_w"] is not None]
        assert g["power_w"] == (sum(power) if power else None)
    a100 = groups[("default", "A100-SXM4-80GB")]
    assert (a100["devices_allocated"], a100["devices_busy"], a100["power_w"]) == (3, 1, 350.5)
    assert groups[("default", "L20")]["cordoned"] == 1
    listed_jobs = jobs(server)
    assert seen["jobs"] == {
        "pending": sum(1 for j in listed_jobs if j["state"] == "pending"),
        "running": sum(1 for j in listed_jobs if j["state"] == "running"),
        "holding": sum(1 for j in listed_jobs if j["state"] in ("admitted", "scheduled")),
    }
    assert seen["jobs"]["pending"] == 1 and sum(seen["pending_by_reason"].values()) == 1
    assert seen["scope"] == "fleet"


@pytest.mark.slow
def test_a_tenant_sees_only_its_own_pending_reasons(server: Server) -> None:
    node(server, "n1", count=4)
    a, b = tenant(server, "a"), tenant(server, "b")
    queue(server, "qb", "b", [quota(1)])  # a quota of 0 would refuse b's job (inadmissible)
    submit(server, a, "A100:2")
    submit(server, b, "A100:1", queue="qb")
    server.schedule()
    submit(server, a, "A100:2")  # one card left: no room
    submit(server, b, "A100:1", queue="qb")  # room, but the quota is in use
    server.schedule()
    admin, mine, theirs = overview(server), overview(server, a), overview(server, b)
    assert admin["pending_by_reason"] == {"insufficient device memory": 1, Waiting.QUOTA: 1}
    assert mine["pending_by_reason"] == {"insufficient device memory": 1}
    assert theirs["pending_by_reason"] == {Waiting.QUOTA: 1}
    assert mine["jobs"] == {"pending": 1, "running": 0, "holding": 1}
    assert theirs["jobs"] == {"pending": 1, "running": 0, "holding": 1}
    assert (mine["scope"], theirs["scope"]) == ("tenant", "tenant")
    assert mine["groups"] == admin["groups"] == theirs["groups"]  # the fleet is everyone's


@pytest.mark.slow
def test_a_new_job_is_counted_as_not_tried_until_a_pass(server: Server) -> None:
    node(server, "n1", count=2)
    a = tenant(server, "a")
    submit(server, a, "A100:1")
    assert overview(server)["pending_by_reason"] == {Waiting.NEW: 1}
    server.schedule()
    assert overview(server)["pending_by_reason"] == {}


@pytest.mark.slow
def test_stranded_capacity_for_a_fragment_no_shape_fits_until_a_pending_job_does(
    server: Server,
) -> None:
    node(server, "n1", count=2)
    a, b = tenant(server, "a"), tenant(server, "b")
    assert overview(server)["stranded"]["memory_mib"] == 0  # whole free cards: wanted
    submit(server, a, "A100:1 cores=90%")  # 10 % of a card left: less than COMMON_SHAPES' least
    server.schedule()
    stranded = overview(server)["stranded"]
    assert stranded["devices"] == 1
    assert stranded["core_pct"] == 10.0
    assert stranded["memory_mib"] == 81920 - 73728
    assert stranded["by_site"] == {
        "default": {k: stranded[k] for k in ("memory_mib", "core_pct", "devices")}
    }
    queue(server, "qb", "b", [quota(1)])
    submit(server, b, "A100:1 cores=10%", queue="qb")
    queue(server, "qb", "b", [quota(0)])  # keeps b's job pending (inadmissible) though it fits
    server.schedule()
    after = overview(server)
    assert after["jobs"]["pending"] == 1
    assert after["pending_by_reason"] == {Waiting.INADMISSIBLE: 1}
    none = {"memory_mib": 0, "core_pct": 0.0, "devices": 0}
    assert after["stranded"] == {
        **none,
        "shapes": stranded["shapes"] + 1,
        "by_site": {"default": none},
    }


@pytest.mark.slow
def test_device_detail_has_the_shares_and_recent_readings(server: Server) -> None:
    node(server, "n1", count=2)
    a = tenant(server, "a")
    first = submit(server, a, "A100:1 cores=50%")
    second = submit(server, a, "A100:1 cores=50%")
    server.schedule()
    for k in range(40):
        metrics(server, "n1", [{"uuid": "n1-gpu0", "utilization_pct": float(k)}])
        server.clock.advance(10)
    r = server.client.get("/v1/devices/n1-gpu0", headers=server.as_(a))
    assert r.status_code == 200, r.text
    detail = r.json()
    assert detail["driver_version"] == "550.54.15" and detail["runtimes"] == {"cuda": "12.4"}
    assert {(x["job"], x["core_permille"]) for x in detail["shares"]} == {
        (first["id"], 500),
        (second["id"], 500),
    }
    recent = detail["recent"]
    assert [x["util_pct"] for x in recent] == [float(k) for k in range(10, 40)]  # the last 30
    assert [x["t"] for x in recent] == sorted(x["t"] for x in recent)
    assert recent[-1]["power_w"] is None  # not read: absent, not zero
    missing = server.client.get("/v1/devices/nope", headers=server.admin)
    assert missing.status_code == 404 and missing.json()["field"] == "device"


@pytest.mark.slow
def test_an_absurd_reading_does_not_break_the_overview(server: Server) -> None:
    node(server, "n1", count=2)
    huge = {"uuid": "n1-gpu0", "utilization_pct": 1e308, "power_w": 1e308, "memory_used_mib": 1}
    metrics(server, "n1", [huge, {"uuid": "n1-gpu1", "power_w": 100.0}])
    group = overview(server)["groups"][0]
    assert (group["power_w"], group["core_pct_used"], group["memory_mib_used"]) == (100.0, None, 1)


@pytest.mark.slow
def test_the_overview_follows_cordons_registrations_and_placements(server: Server) -> None:
    """What the overview keeps between calls (layout, shape table, stranded measure) is made
    again when what it was made from changes: a stale one would show the old numbers."""
    node(server, "n1", count=2)
    a = tenant(server, "a")

    def a100() -> dict[str, Any]:
        return next(g for g in overview(server)["groups"] if g["device_model"] == "A100-SXM4-80GB")

    assert (a100()["cordoned"], a100()["devices_allocated"]) == (0, 0)
    assert server.client.post("/v1/nodes/n1/cordon", headers=server.admin).status_code == 200
    assert a100()["cordoned"] == 2
    assert server.client.post("/v1/nodes/n1/uncordon", headers=server.admin).status_code == 200
    assert a100()["cordoned"] == 0
    node(server, "n2", count=4)  # the engine is rebuilt
    assert a100()["devices_total"] == 6
    submit(server, a, "A100:1 cores=90%")
    server.schedule()
    assert a100()["devices_allocated"] == 1
    assert overview(server)["stranded"]["devices"] == 1
