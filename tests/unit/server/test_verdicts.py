"""Submissions nothing in the pool could hold are refused with the closest miss, and nothing is
stored; a queue for a pool that grows may keep them, saying they are unschedulable (issue 21)."""

from __future__ import annotations

import pytest
from server_kit import Server, job, node, queue, row_counts, submit, tenant


@pytest.mark.parametrize(
    ("spec", "field", "reason"),
    [
        (
            "A100 mem=100Gi",
            "spec.devices.memory",
            "the largest NVIDIA A100-SXM4-80GB card has 80Gi; asked 100Gi",
        ),
        ("cpu=1000", "spec.cpu", "the largest node has 128 CPU; asked 1000"),
        (
            "A100:8 replicas=4 gang",
            "spec.replicas",
            "holds 1 replicas of this at once; asked 4",
        ),
        (
            "24GB..40GB:2",
            "spec.devices.card_memory",
            "no card of 24GB..40GB in the pool; it has 80GB",
        ),
    ],
)
@pytest.mark.slow
def test_a_request_nothing_could_hold_is_422_naming_the_closest_miss(
    server: Server, spec: str, field: str, reason: str
) -> None:
    node(server, "n1")  # 8 A100 80GB, 128 CPU
    a = tenant(server, "a")
    before = row_counts(server)
    r = server.client.post(
        "/v1/jobs", json={"spec": spec, "command": ["true"]}, headers=server.as_(a)
    )
    assert r.status_code == 422, r.text
    body = r.json()
    assert body["field"] == field
    assert body["reason"].startswith("nothing in the pool can hold it, even empty: ")
    assert reason in body["reason"]
    assert row_counts(server) == before
    assert not server.plane.queued


@pytest.mark.slow
def test_the_json_form_is_refused_the_same_way(server: Server) -> None:
    node(server, "n1")
    a = tenant(server, "a")
    body = {"request": {"devices": {"models": ["A100"], "count": 9}}, "command": ["true"]}
    r = server.client.post("/v1/jobs", json=body, headers=server.as_(a))
    assert r.status_code == 422 and r.json()["field"] == "request.devices.count"


@pytest.mark.slow
def test_a_queue_for_a_growing_pool_keeps_it_waiting_as_unschedulable(server: Server) -> None:
    node(server, "n1")
    a = tenant(server, "a")
    shown = queue(server, "a", "a", [], allow_unfittable=True)
    assert shown["allow_unfittable"] is True
    waiting = submit(server, a, "A100:16")
    server.schedule()
    got = job(server, waiting["id"])
    assert got["state"] == "pending"
    assert got["reason"].startswith("unschedulable: nothing in the pool can hold it")
    assert "no node has more than 8 NVIDIA A100-SXM4-80GB cards; asked 16" in got["reason"]
    node(server, "n2", count=16)  # the pool grows: now it fits
    server.schedule()
    assert job(server, waiting["id"])["state"] == "scheduled"


@pytest.mark.slow
def test_a_job_that_fits_only_on_a_cordoned_node_waits(server: Server) -> None:
    node(server, "n1")
    a = tenant(server, "a")
    assert server.client.post("/v1/nodes/n1/cordon", headers=server.admin).status_code == 200
    waiting = submit(server, a, "A100:8")
    server.schedule()
    assert job(server, waiting["id"])["state"] == "pending"


@pytest.mark.slow
def test_unlisted_flavors_deny_through_the_api(server: Server) -> None:
    node(server, "a100")
    node(server, "t4", model="Tesla T4", memory_mib=15360, count=2)
    a = tenant(server, "a")
    quota = {"flavor": "A100", "resource": "devices", "nominal": 8, "borrowing_limit": None}
    shown = queue(server, "a", "a", [quota], unlisted_flavors="deny")
    assert shown["unlisted_flavors"] == "deny"
    denied = submit(server, a, "T4")
    server.schedule()
    got = job(server, denied["id"])
    assert got["state"] == "pending" and "no flavour of this queue" in got["reason"]
    queue(server, "a", "a", [quota])  # allow, the default: T4 cards are used without quota
    server.schedule()
    assert job(server, denied["id"])["state"] == "scheduled"
