"""Admission through the API: quotas per flavour, cohort borrowing, DRF order between tenants, and
priority preemption (minimal, deterministic victims, requeued with the preemptor named)."""

from __future__ import annotations

from typing import Any

import pytest
from server_kit import (
    BOTH_STORES,
    Server,
    devices,
    heartbeat,
    job,
    node,
    node_body,
    queue,
    queue_used,
    report,
    states,
    submit,
    tenant,
)

STORES = BOTH_STORES  # its tests' server on SQLite and on PostgreSQL (conftest.py)


DEVICES = "devices"


def quota(flavor: str, resource: str, nominal: int, borrowing_limit: int | None = None) -> dict:
    return {
        "flavor": flavor,
        "resource": resource,
        "nominal": nominal,
        "borrowing_limit": borrowing_limit,
    }


@pytest.mark.slow
def test_submission_beyond_quota_stays_pending_naming_flavour_and_resource(server: Server) -> None:
    node(server, "n1")
    a = tenant(server, "a")
    queue(server, "qa", "a", [quota("nvidia", DEVICES, 2)])
    first = submit(server, a, "A100:2", queue="qa")
    over = submit(server, a, "A100:1", queue="qa")
    server.schedule()
    assert job(server, first["id"])["state"] == "scheduled"
    pending = job(server, over["id"])
    assert pending["state"] == "pending"
    assert "nvidia" in pending["reason"] and "devices quota" in pending["reason"]
    assert "2 used + 1 asked > 2 nominal" in pending["reason"]
    assert queue_used(server, "qa")[("nvidia", DEVICES)] == 2
    q = server.client.get("/v1/queues/qa", headers=server.as_(a)).json()
    assert (q["pending"], q["running"]) == (1, 1)

    # usage is released on cancel, and the waiting job gets the room
    r = server.client.post(f"/v1/jobs/{first['id']}/cancel", headers=server.as_(a))
    assert r.json()["state"] == "cancelled"
    assert queue_used(server, "qa")[("nvidia", DEVICES)] == 0
    server.schedule()
    assert job(server, over["id"])["state"] == "scheduled"
    assert queue_used(server, "qa")[("nvidia", DEVICES)] == 1


@pytest.mark.slow
def test_memory_quota_charges_the_real_share(server: Server) -> None:
    node(server, "n1", count=1)
    a = tenant(server, "a")
    queue(server, "qa", "a", [quota("*", "device_memory_mib", 50 * 1024)])
    j1 = submit(server, a, "A100 mem=30Gi", queue="qa")
    j2 = submit(server, a, "A100 mem=30Gi", queue="qa")
    server.schedule()
    assert job(server, j1["id"])["state"] == "scheduled"
    assert job(server, j2["id"])["state"] == "pending"
    assert "device memory quota" in job(server, j2["id"])["reason"]
    assert queue_used(server, "qa")[("*", "device_memory_mib")] == 30 * 1024


@pytest.mark.slow
def test_cohort_borrowing_up_to_the_limit(server: Server) -> None:
    node(server, "n1")
    a, b = tenant(server, "a"), tenant(server, "b")
    queue(server, "qa", "a", [quota("nvidia", DEVICES, 2, borrowing_limit=1)], cohort="c")
    queue(server, "qb", "b", [quota("nvidia", DEVICES, 2)], cohort="c")
    borrowed = submit(server, a, "A100:3", queue="qa")  # 2 nominal + 1 borrowed from qb
    server.schedule()
    assert job(server, borrowed["id"])["state"] == "scheduled"
    over = submit(server, a, "A100:1", queue="qa")  # past the borrowing limit
    server.schedule()
    assert job(server, over["id"])["state"] == "pending"
    assert "3 used + 1 asked > 2 nominal + 1 borrowable" in job(server, over["id"])["reason"]
    # qb never goes past its own nominal (it has no borrowing room left: qa holds it), and may
    # use all of it while qa borrows (the cards are free here, so nothing needs reclaiming).
    for _ in range(3):
        submit(server, b, "A100:1", queue="qb")
    server.schedule()
    assert queue_used(server, "qa")[("nvidia", DEVICES)] == 3  # nominal 2 + borrowing limit 1
    assert queue_used(server, "qb")[("nvidia", DEVICES)] == 2


@pytest.mark.slow
def test_a_quota_set_later_counts_the_jobs_already_running(server: Server) -> None:
    node(server, "n1")
    a = tenant(server, "a")  # its queue 'a' has no quota yet
    fill_with_low(server, a, 5)
    queue(server, "a", "a", [quota("A100", DEVICES, 2)])
    assert queue_used(server, "a")[("A100", DEVICES)] == 5
    late = submit(server, a, "A100:1")
    server.schedule()
    assert "A100: devices quota: 5 used + 1 asked > 2 nominal" in job(server, late["id"])["reason"]


@pytest.mark.slow
def test_queue_without_cohort_cannot_borrow(server: Server) -> None:
    tenant(server, "a")
    body = {"name": "qa", "tenant": "a", "quotas": [quota("nvidia", DEVICES, 2, 1)]}
    r = server.client.put("/v1/queues/qa", json=body, headers=server.admin)
    assert r.status_code == 422 and "borrowing_limit" in r.json()["reason"]
    body = {"name": "other", "tenant": "a"}
    r = server.client.put("/v1/queues/qa", json=body, headers=server.admin)
    assert r.status_code == 422 and r.json()["field"] == "name"


@pytest.mark.slow
def test_drf_serves_the_tenant_with_the_smaller_share_first(server: Server) -> None:
    node(server, "n1", count=4)
    a, b = tenant(server, "a"), tenant(server, "b")
    for _ in range(2):
        submit(server, a, "A100:1")
    server.schedule()  # a holds 2 of 4 devices
    older = submit(server, a, "A100:1")
    b_jobs = [submit(server, b, "A100:1") for _ in range(3)]
    server.schedule()
    # b's dominant share (0) is below a's (1/2): b goes first although a's job is older
    assert [job(server, j["id"])["state"] for j in b_jobs] == ["scheduled", "scheduled", "pending"]
    assert job(server, older["id"])["state"] == "pending"


@pytest.mark.slow
def test_drf_weights(server: Server) -> None:
    node(server, "n1", count=4)
    a, b = tenant(server, "a", weight=4), tenant(server, "b")
    submit(server, a, "A100:1")
    submit(server, b, "A100:1")
    server.schedule()  # both hold 1/4; a's weighted share is 1/16, b's 1/4
    jb = submit(server, b, "A100:1")
    ja = submit(server, a, "A100:1")
    extra = submit(server, a, "A100:1")
    server.schedule()
    assert job(server, ja["id"])["state"] == "scheduled"
    assert job(server, extra["id"])["state"] == "scheduled"
    assert job(server, jb["id"])["state"] == "pending"


def fill_with_low(server: Server, token: str, n: int, spec: str = "A100:1") -> list[int]:
    ids = [submit(server, token, spec, priority=0)["id"] for _ in range(n)]
    server.schedule()
    assert all(job(server, i)["state"] == "scheduled" for i in ids)
    return ids


@pytest.mark.slow
def test_priority_preempts_minimally_and_requeues_the_victims(server: Server) -> None:
    node(server, "n1")
    a = tenant(server, "a")
    queue(server, "a", "a", [], max_priority=10)  # the admin grants priority
    low = fill_with_low(server, a, 8)
    high = submit(server, a, "A100:2", priority=10)
    server.schedule()
    victims = [i for i in low if job(server, i)["state"] == "pending"]
    assert len(victims) == 2  # minimal: exactly the room asked for
    for v in victims:
        got = job(server, v)
        assert got["attempts"] == 0 and got["retries"] == 1  # never started; requeued once
        assert states(server, v) == ["pending", "admitted", "scheduled", "pending"]
        assert f"preempted by job {high['id']}" in got["events"][-1]["reason"]
    server.schedule()
    assert job(server, high["id"])["state"] == "scheduled"
    assert all(job(server, v)["state"] == "pending" for v in victims)  # no room for them now
    assert all(len(d["jobs"]) == 1 for d in devices(server))


@pytest.mark.slow
def test_a_queue_that_never_preempts_leaves_lower_priority_work_running(server: Server) -> None:
    node(server, "n1")
    a = tenant(server, "a")
    shown = queue(server, "a", "a", [], max_priority=10, preemption="never")
    assert shown["preemption"] == "never"
    low = fill_with_low(server, a, 8)
    high = submit(server, a, "A100:2", priority=10)
    server.schedule()
    assert all(job(server, i)["state"] == "scheduled" for i in low)
    got = job(server, high["id"])
    assert got["state"] == "pending" and "preempting" not in got["reason"]
    bad = server.client.put(
        "/v1/queues/a",
        json={"name": "a", "tenant": "a", "preemption": "often"},
        headers=server.admin,
    )
    assert bad.status_code == 422 and "preemption" in bad.text
    kept = server.client.get("/v1/queues/a", headers=server.admin).json()
    assert kept["preemption"] == "never" and kept["max_priority"] == 10  # unchanged


@pytest.mark.slow
def test_a_pass_tries_a_refused_request_once_while_nothing_is_released(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    node(server, "n1")
    a = tenant(server, "a")
    queue(server, "a", "a", [])
    fill_with_low(server, a, 1)
    flood = [submit(server, a, "A100:8")["id"] for _ in range(5)]  # one card more than is free
    admission = server.plane.admission
    tries: list[str] = []
    real_admit = admission.admit

    def counting(req: Any, queue_name: str) -> Any:
        tries.append(req.name)
        return real_admit(req, queue_name)

    monkeypatch.setattr(admission, "admit", counting)
    server.schedule()
    assert len(tries) == 1  # the other four are known to fail the same way
    reasons = {job(server, i)["reason"] for i in flood}
    assert len(reasons) == 1 and "0/1 nodes fit" in next(iter(reasons))


@pytest.mark.slow
def test_a_lender_reclaims_its_quota_from_a_borrowing_queue(server: Server) -> None:
    node(server, "n1")  # 8 cards
    lender, borrower = tenant(server, "lend"), tenant(server, "borrow")
    for name in ("lend", "borrow"):
        queue(server, name, name, [quota("nvidia", DEVICES, 4)], cohort="c")
    borrowed = fill_with_low(server, borrower, 8)  # 4 of its own, 4 lent by the idle lender
    mine = submit(server, lender, "A100:2")
    server.schedule()
    victims = [i for i in borrowed if job(server, i)["state"] == "pending"]
    assert victims == borrowed[-2:]  # equal priority: the newest go
    for v in victims:
        assert "queue lend reclaims the quota it lent" in job(server, v)["events"][-1]["reason"]
    assert "reclaiming quota lent to borrow" in job(server, mine["id"])["reason"]
    server.schedule()
    assert job(server, mine["id"])["state"] == "scheduled"
    assert queue_used(server, "borrow")[("nvidia", DEVICES)] == 6
    server.schedule()  # the requeued borrower jobs wait: their queue is at what the cohort allows
    assert all(job(server, v)["state"] == "pending" for v in victims)


@pytest.mark.slow
def test_preemption_is_deterministic(server: Server, tmp_path_factory: object) -> None:
    node(server, "n1")
    a = tenant(server, "a")
    queue(server, "a", "a", [], max_priority=10)  # the admin grants priority
    low = fill_with_low(server, a, 8)
    submit(server, a, "A100:3", priority=5)
    server.schedule()
    victims = [i for i in low if job(server, i)["state"] == "pending"]
    # older (and equally important) jobs are spared first, so the newest three go
    assert victims == low[-3:]


@pytest.mark.slow
def test_running_victims_stop_before_the_preemptor_is_placed(server: Server) -> None:
    node(server, "n1", count=2)
    a = tenant(server, "a")
    queue(server, "a", "a", [], max_priority=10)  # the admin grants priority
    low = fill_with_low(server, a, 2)
    heartbeat(server, "n1", [report(i, 0, "running") for i in low])
    high = submit(server, a, "A100:1", priority=10)
    server.schedule()
    victim = next(i for i in low if job(server, i)["reason"].startswith("stopping"))
    assert job(server, victim)["state"] == "running"
    assert job(server, high["id"])["state"] == "pending"
    assert (
        "waiting for preempted" in job(server, high["id"])["reason"]
        or "preempting" in job(server, high["id"])["reason"]
    )
    server.schedule()  # still stopping: no second victim is picked
    assert sum(job(server, i)["reason"].startswith("stopping") for i in low) == 1
    reply = heartbeat(server, "n1", [report(i, 0, "running") for i in low])
    assert reply["stop"] == [[victim, 0]]
    heartbeat(server, "n1", [report(victim, 0, "stopped")])
    got = job(server, victim)
    assert got["state"] == "pending" and got["attempts"] == 1
    assert f"preempted by job {high['id']}" in got["reason"]
    server.schedule()
    assert job(server, high["id"])["state"] == "scheduled"


@pytest.mark.slow
def test_fractional_victim_frees_only_its_cards_share(server: Server) -> None:
    node(server, "n1", count=2)
    a = tenant(server, "a")
    queue(server, "a", "a", [], max_priority=10)  # the admin grants priority
    low = fill_with_low(server, a, 4, "A100 mem=40Gi")  # two per card
    before = {d["uuid"]: set(d["jobs"]) for d in devices(server)}
    high = submit(server, a, "A100 mem=40Gi", priority=10)
    server.schedule()
    victims = [i for i in low if job(server, i)["state"] == "pending"]
    assert len(victims) == 1
    server.schedule()
    after = {d["uuid"]: d for d in devices(server)}
    assert all(d["allocated_memory_mib"] == 80 * 1024 for d in after.values())
    card = next(u for u, js in before.items() if victims[0] in js)
    assert set(after[card]["jobs"]) == (before[card] - set(victims)) | {high["id"]}
    other = next(u for u in before if u != card)
    assert set(after[other]["jobs"]) == before[other]


@pytest.mark.slow
def test_equal_priority_never_preempts(server: Server) -> None:
    node(server, "n1", count=1)
    a = tenant(server, "a")
    low = fill_with_low(server, a, 1)
    same = submit(server, a, "A100:1", priority=0)
    server.schedule()
    assert job(server, low[0])["state"] == "scheduled"
    assert job(server, same["id"])["state"] == "pending"


@pytest.mark.slow
def test_a_quota_held_in_one_site_places_there_and_a_bad_site_flavour_is_refused(
    server: Server,
) -> None:
    """A queue's quota may be per site (``A100@east``): its job lands on east's cards though
    west has more free; a flavour naming no site after '@' is refused naming the quota, and the
    refused queue is not stored."""
    for name, site in (("w1", "west"), ("e1", "east")):
        body = node_body(name, count=4) | {"site": site}
        r = server.client.post("/v1/agent/register", json=body, headers=server.admin)
        assert r.status_code == 200, r.text
    a = tenant(server, "a")
    bad = {"name": "qa", "tenant": "a", "quotas": [quota("A100@", DEVICES, 1)]}
    r = server.client.put("/v1/queues/qa", json=bad, headers=server.admin)
    assert r.status_code == 422 and "quotas" in r.json()["field"], r.text
    assert "after '@' comes a site" in r.json()["reason"]
    assert server.client.get("/v1/queues/qa", headers=server.admin).status_code == 404
    queue(server, "qa", "a", [quota("A100@east", DEVICES, 2)], unlisted_flavors="deny")
    jobs = [submit(server, a, "A100:1", queue="qa") for _ in range(3)]
    server.schedule()
    placed = [job(server, j["id"]) for j in jobs]
    assert [j["state"] for j in placed] == ["scheduled", "scheduled", "pending"]
    assert {a["node"] for j in placed[:2] for a in j["assignments"]} == {"e1"}
    assert "A100@east: devices quota: 2 used + 1 asked > 2 nominal" in placed[2]["reason"]
    assert queue_used(server, "qa")[("A100@east", DEVICES)] == 2
