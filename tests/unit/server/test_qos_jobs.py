"""QoS classes on the server (issue 54 part 5): a job shows its class and keeps it across a
restart; on an over-committed card a best-effort share rides on the over-committed part while a
guaranteed one waits for physical room, which priority preemption frees by stopping best-effort
work first; a guaranteed job is never preempted; contradictory or unknown classes are refused."""

from __future__ import annotations

from typing import Any

import pytest
from server_kit import (
    BOTH_STORES,
    Server,
    heartbeat,
    job,
    node_body,
    queue,
    reopen,
    report,
    submit,
    tenant,
)

STORES = BOTH_STORES  # its tests' server on SQLite and on PostgreSQL (conftest.py)


def _over_committed(server: Server, name: str = "oc", factor: float = 2.0) -> None:
    """One A100 that may grant ``factor`` times its 80 GiB."""
    body = node_body(name, count=1)
    body["devices"][0]["memory_overcommit"] = factor
    r = server.client.post("/v1/agent/register", json=body, headers=server.admin)
    assert r.status_code == 200, r.text


def _held(server: Server, job_id: int) -> bool:
    return job(server, job_id)["state"] in ("admitted", "scheduled", "running")


def _run(server: Server, node: str, ids: list[int]) -> None:
    heartbeat(server, node, [report(i, 0, "running") for i in ids])


@pytest.mark.slow
def test_a_best_effort_share_rides_on_the_over_committed_part_a_guaranteed_one_waits(
    server: Server,
) -> None:
    _over_committed(server)
    a = tenant(server, "a")
    queue(server, "a", "a", [], preemption="never")
    riders = [submit(server, a, "A100 mem=50% qos=best-effort")["id"] for _ in range(3)]
    server.schedule()
    assert all(_held(server, i) for i in riders)  # 1.5 physical cards granted on one card
    shown = job(server, riders[0])
    assert shown["qos"] == "best-effort" and shown["request"]["qos"] == "best-effort"
    assert shown["priority"] == -(1 << 31)
    guaranteed = submit(server, a, "A100 mem=50% qos=guaranteed")["id"]
    server.schedule()
    waiting = job(server, guaranteed)
    assert waiting["state"] == "pending"
    assert "only over-committed device capacity left" in waiting["reason"]
    assert waiting["qos"] == "guaranteed" and waiting["priority"] == 0
    _over_committed(server, "spare", factor=1.0)  # a card with physical room: it goes there
    server.schedule()
    placed = job(server, guaranteed)
    assert placed["assignments"][0]["node"] == "spare", placed


@pytest.mark.slow
def test_guaranteed_work_preempts_best_effort_for_the_physical_part_and_is_never_preempted(
    server: Server,
) -> None:
    _over_committed(server)
    a = tenant(server, "a")
    queue(server, "a", "a", [], max_priority=100)
    burst = submit(server, a, "A100 mem=50%", priority=1)["id"]
    rider = submit(server, a, "A100 mem=50% qos=best-effort")["id"]
    server.schedule()
    _run(server, "oc", [burst, rider])  # one physical card granted: no physical room left
    guaranteed = submit(server, a, "A100 mem=50% qos=guaranteed", priority=5)["id"]
    server.schedule()
    stopping = [i for i in (burst, rider) if job(server, i)["reason"].startswith("stopping")]
    assert stopping == [rider]  # the lowest priority: the best-effort share
    heartbeat(server, "oc", [report(rider, 0, "stopped"), report(burst, 0, "running")])
    server.schedule()
    assert _held(server, guaranteed)
    _run(server, "oc", [burst, guaranteed])
    high = submit(server, a, "A100:1", priority=100)["id"]  # a whole card: all must go
    server.schedule()
    assert not any(job(server, i)["reason"].startswith("stopping") for i in (burst, guaranteed))
    assert job(server, high)["state"] == "pending"


@pytest.mark.slow
def test_the_class_and_the_guaranteed_mark_survive_a_restart(server: Server) -> None:
    _over_committed(server)
    a = tenant(server, "a")
    held = submit(server, a, "A100 mem=25% qos=guaranteed")["id"]
    server.schedule()
    again = reopen(server)
    with again.client:
        assert job(again, held)["qos"] == "guaranteed"
        (alloc,) = again.plane.held_jobs[held].allocations
        assert alloc.guaranteed
    again.plane.db.dispose()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"spec": "A100 qos=guaranteed", "preemptible": True}, "preemptible"),
        ({"spec": "A100 qos=gold"}, "spec.qos"),
        ({"request": {"qos": "platinum"}}, "request.qos"),
    ],
)
def test_a_contradictory_or_unknown_class_is_refused_naming_the_field(
    server: Server, body: dict[str, Any], field: str
) -> None:
    a = tenant(server, "a")
    r = server.client.post("/v1/jobs", json=body | {"command": ["true"]}, headers=server.as_(a))
    assert r.status_code == 422, r.text
    assert r.json()["field"] == field, r.text


def test_a_guaranteed_share_larger_than_any_physical_card_is_refused_naming_qos(
    server: Server,
) -> None:
    """120 GiB fits the 160 GiB an over-committed 80 GiB card may grant, never its physical part:
    a burstable job is accepted, a guaranteed one refused at submission."""
    _over_committed(server)
    a = tenant(server, "a")
    submit(server, a, "A100 mem=120Gi")
    r = server.client.post(
        "/v1/jobs",
        json={"spec": "A100 mem=120Gi qos=guaranteed", "command": ["true"]},
        headers=server.as_(a),
    )
    assert r.status_code == 422, r.text
    assert r.json()["field"] == "spec.qos", r.text
    assert "only over-committed device capacity" in r.json()["reason"], r.text
