"""A card its agent reads unhealthy: marked with its cause, cordoned, its jobs stopped and requeued
by their on_node_lost policy (or kept, for a warning), back after the settle period or the
admin's uncordon; counted by cause in Prometheus (server/card_health.py)."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from server_kit import Server, devices, job, node, report, submit, tenant


def beat(
    srv: Server,
    name: str,
    replicas: list[dict[str, Any]] | None = None,
    sick: dict[str, str] | None = None,
    warn: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A heartbeat of ``name`` reading every card healthy but those in ``sick`` (uuid: cause)
    and those warned in ``warn``."""
    sick, warn = sick or {}, warn or {}
    metrics = [
        {
            "uuid": d["uuid"],
            "healthy": d["uuid"] not in sick,
            "health_cause": sick.get(d["uuid"]) or warn.get(d["uuid"]),
        }
        for d in devices(srv, name)
    ]
    body = {"node": name, "replicas": replicas or [], "metrics": metrics}
    r = srv.client.post("/v1/agent/heartbeat", json=body, headers=srv.admin)
    assert r.status_code == 200, r.text
    return dict(r.json())


def card(srv: Server, uuid: str) -> dict[str, Any]:
    return next(d for d in devices(srv) if d["uuid"] == uuid)


def health_events(srv: Server) -> dict[str, float]:
    text = srv.client.get("/metrics", headers=srv.admin).text
    return {
        s.labels["cause"]: s.value
        for f in text_string_to_metric_families(text)
        if f.name == "xpupool_device_health_events"
        for s in f.samples
        if s.name.endswith("_total")
    }


@pytest.mark.parametrize(("policy", "final"), [("requeue", "pending"), ("fail", "lost")])
def test_unhealthy_card_is_cordoned_and_its_job_stopped_per_policy(
    server: Server, policy: str, final: str
) -> None:
    node(server, "n1", count=2)
    a = tenant(server, "a")
    j = submit(server, a, "A100:1", on_node_lost=policy)
    server.schedule()
    uuid = job(server, j["id"])["assignments"][0]["devices"][0]["uuid"]
    running = [report(j["id"], 0, "running")]
    beat(server, "n1", running)
    reply = beat(server, "n1", running, sick={uuid: "xid-79: GPU has fallen off the bus"})
    assert [j["id"], 0] in [list(s) for s in reply["stop"]]  # the agent is told to stop it
    got = card(server, uuid)
    assert got["healthy"] is False and got["cordoned"] is True
    assert got["health"] == "unhealthy" and got["health_cause"].startswith("xid-79: ")
    assert "stopping" in job(server, j["id"])["reason"]
    beat(server, "n1", [report(j["id"], 0, "stopped")], sick={uuid: "xid-79: fell off"})
    got_job = job(server, j["id"])
    assert got_job["state"] == final and f"card {uuid} on n1 unhealthy" in got_job["reason"]
    assert health_events(server) == {"xid-79": 1.0}
    # nothing new lands on it: a second job goes to the other card
    k = submit(server, a, "A100:1")
    server.schedule()
    if policy == "requeue":
        server.schedule()
    placed = [
        job(server, i)["assignments"][0]["devices"][0]["uuid"]
        for i in (j["id"], k["id"])
        if job(server, i)["assignments"]
    ]
    assert uuid not in placed and placed


def test_card_returns_after_the_settle_period(server: Server) -> None:
    server.plane.card_health.settle_s = 60.0
    node(server, "n1", count=1)
    beat(server, "n1", sick={"n1-gpu0": "ecc-uncorrectable: 2 volatile uncorrectable"})
    assert card(server, "n1-gpu0")["cordoned"] is True
    server.clock.advance(30)
    beat(server, "n1")  # healthy, but for 30 s only
    assert card(server, "n1-gpu0")["cordoned"] is True
    server.clock.advance(31)
    beat(server, "n1")  # 61 s since the last bad reading
    got = card(server, "n1-gpu0")
    assert got["cordoned"] is False and got["healthy"] is True and got["health_cause"] is None


def test_a_fault_during_the_settle_period_starts_it_again(server: Server) -> None:
    server.plane.card_health.settle_s = 60.0
    node(server, "n1", count=1)
    beat(server, "n1", sick={"n1-gpu0": "xid-48: double-bit ECC error"})
    server.clock.advance(50)
    beat(server, "n1", sick={"n1-gpu0": "xid-48: double-bit ECC error"})
    server.clock.advance(50)
    beat(server, "n1")
    assert card(server, "n1-gpu0")["cordoned"] is True  # 50 s since the last fault
    assert health_events(server) == {"xid-48": 1.0}  # one event, read twice


def test_admin_uncordon_brings_it_back_at_once(server: Server) -> None:
    node(server, "n1", count=1)
    beat(server, "n1", sick={"n1-gpu0": "row-remap-pending: reset needed"})
    r = server.client.post("/v1/devices/n1-gpu0/uncordon", headers=server.admin)
    assert r.status_code == 200 and r.json()["cordoned"] is False
    # the same fault, still read, is the one the admin saw: not acted on again
    beat(server, "n1", sick={"n1-gpu0": "row-remap-pending: reset needed"})
    assert card(server, "n1-gpu0")["cordoned"] is False
    # a new one is
    beat(server, "n1", sick={"n1-gpu0": "xid-79: GPU has fallen off the bus"})
    assert card(server, "n1-gpu0")["cordoned"] is True


def test_a_warning_keeps_the_card_and_its_job(server: Server) -> None:
    node(server, "n1", count=1)
    a = tenant(server, "a")
    j = submit(server, a, "A100:1")
    server.schedule()
    running = [report(j["id"], 0, "running")]
    reply = beat(server, "n1", running, warn={"n1-gpu0": "xid-13: graphics engine exception"})
    assert not reply["stop"]
    got = card(server, "n1-gpu0")
    assert got["health"] == "warning" and got["healthy"] is True and got["cordoned"] is False
    assert job(server, j["id"])["state"] == "running"
    assert health_events(server) == {"xid-13": 1.0}


def test_a_cordon_the_admin_set_stays_after_the_settle(server: Server) -> None:
    server.plane.card_health.settle_s = 10.0
    node(server, "n1", count=1)
    server.client.post("/v1/devices/n1-gpu0/cordon", headers=server.admin)
    beat(server, "n1", sick={"n1-gpu0": "gpu-lost: NVML_ERROR_GPU_IS_LOST"})
    server.clock.advance(11)
    beat(server, "n1")
    got = card(server, "n1-gpu0")
    assert got["cordoned"] is True and got["health"] == "healthy"


def test_a_cambricon_card_cnmon_reads_unhealthy_empties_the_same_way(server: Server) -> None:
    """The path of another vendor than NVIDIA: ``cnmon info``'s Health State (a recorded-format
    fixture) read by the probe, put on the wire by the agent's ``device_metrics``, and acted on
    by the server as an XID is: cordoned, its job stopped, counted under ``other``."""
    from dataclasses import replace
    from pathlib import Path

    from xpupool.agent.inventory import node_in
    from xpupool.agent.monitor import device_metrics
    from xpupool.probes.base import DeviceInfo, Health
    from xpupool.probes.cnmon import parse_cnmon

    fixtures = Path(__file__).parents[2] / "fixtures" / "probes" / "cnmon"
    (sick,) = parse_cnmon((fixtures / "mlu370-x8-unhealthy.txt").read_text())
    assert sick.health is Health.UNHEALTHY
    fine = replace(sick, health=Health.HEALTHY, health_detail="")  # the same card, read Good
    body = node_in("n1", [fine]).model_dump(mode="json")
    r = server.client.post("/v1/agent/register", json=body, headers=server.admin)
    assert r.status_code == 200, r.text
    a = tenant(server, "a")
    j = submit(server, a, "MLU370-X8:1", on_node_lost="requeue")
    server.schedule()
    assert job(server, j["id"])["assignments"][0]["devices"][0]["uuid"] == sick.uuid

    def beat_with(d: DeviceInfo, replicas: list[dict[str, Any]]) -> dict[str, Any]:
        metrics = [device_metrics(d).model_dump(mode="json")]
        hb = {"node": "n1", "replicas": replicas, "metrics": metrics}
        r = server.client.post("/v1/agent/heartbeat", json=hb, headers=server.admin)
        assert r.status_code == 200, r.text
        return dict(r.json())

    running = [report(j["id"], 0, "running")]
    assert not beat_with(fine, running)["stop"]
    reply = beat_with(sick, running)
    assert [j["id"], 0] in [list(s) for s in reply["stop"]]
    got = card(server, sick.uuid)
    assert got["healthy"] is False and got["cordoned"] is True
    assert got["health_cause"] == "cnmon health: Device Bad"
    beat_with(sick, [report(j["id"], 0, "stopped")])
    assert job(server, j["id"])["state"] == "pending"  # requeued, by its on_node_lost policy
    assert health_events(server) == {"other": 1.0}
