"""Jobs no future of their queue's quotas can admit (issue 42 part 3, docs/queues.md): refused at
submission with a 422 naming ``queue`` and the arithmetic, storing nothing; a pending job that a
quota change leaves above its queue's ceiling stays pending, marked "inadmissible: ..." with an
event, and is decided again when a quota of its cohort changes (Kueue's inadmissible workloads)."""

from __future__ import annotations

from typing import Any

import pytest
from server_kit import Server, job, node, queue, row_counts, submit, tenant

DEVICES = "devices"


def quota(flavor: str, nominal: int, borrowing_limit: int | None = None) -> dict[str, Any]:
    return {
        "flavor": flavor,
        "resource": DEVICES,
        "nominal": nominal,
        "borrowing_limit": borrowing_limit,
    }


def _refused(server: Server, token: str, spec: str, queue_name: str) -> dict[str, Any]:
    before = row_counts(server)
    r = server.client.post(
        "/v1/jobs", json={"spec": spec, "queue": queue_name, "command": ["true"]},
        headers=server.as_(token),
    )  # fmt: skip
    assert r.status_code == 422, r.text
    assert row_counts(server) == before  # a refusal stores nothing
    return dict(r.json())


@pytest.mark.slow
def test_a_request_above_the_queues_nominal_without_borrowing_is_refused(server: Server) -> None:
    node(server, "n1")  # 8 A100: the pool could hold it, the quota never
    a = tenant(server, "a")
    queue(server, "qa", "a", [quota("A100", 2)])
    body = _refused(server, a, "A100:4", "qa")
    assert (body["field"], body["value"]) == ("queue", "qa")
    assert body["reason"] == (
        "the queue can never hold it: A100: devices quota: 4 asked > 2 nominal + 0 borrowable "
        "at most"
    )
    # at the bound, it is accepted and runs
    ok = submit(server, a, "A100:2", queue="qa")
    server.schedule()
    assert job(server, ok["id"])["state"] == "scheduled"


@pytest.mark.slow
def test_in_a_cohort_the_bound_is_the_lesser_of_the_limit_and_the_others_nominal(
    server: Server,
) -> None:
    node(server, "n1")
    a, _ = tenant(server, "a"), tenant(server, "b")
    queue(server, "qa", "a", [quota("A100", 2, borrowing_limit=1)], cohort="c")
    queue(server, "qb", "b", [quota("A100", 3)], cohort="c")
    body = _refused(server, a, "A100:4", "qa")
    assert body["reason"].endswith("4 asked > 2 nominal + 1 borrowable at most")
    submit(server, a, "A100:3", queue="qa")  # 2 + min(1, 3)
    queue(server, "qa", "a", [quota("A100", 2)], cohort="c")  # no limit: 2 + 3
    submit(server, a, "A100:5", queue="qa")
    body = _refused(server, a, "A100:6", "qa")
    assert body["reason"].endswith("6 asked > 2 nominal + 3 borrowable at most")


@pytest.mark.slow
def test_a_job_that_waits_for_quota_in_use_is_not_inadmissible(server: Server) -> None:
    node(server, "n1")
    a = tenant(server, "a")
    queue(server, "qa", "a", [quota("A100", 2)])
    first = submit(server, a, "A100:2", queue="qa")
    second = submit(server, a, "A100:2", queue="qa")
    server.schedule()
    waiting = job(server, second["id"])
    assert waiting["state"] == "pending"
    assert "2 used + 2 asked > 2 nominal + 0 borrowable" in waiting["reason"]
    assert not waiting["reason"].startswith("inadmissible")
    server.client.post(f"/v1/jobs/{first['id']}/cancel", headers=server.as_(a))
    server.schedule()
    assert job(server, second["id"])["state"] == "scheduled"


@pytest.mark.slow
def test_a_quota_change_marks_a_pending_job_inadmissible_until_its_cohort_changes(
    server: Server,
) -> None:
    node(server, "n1", count=4)
    a, b = tenant(server, "a"), tenant(server, "b")
    queue(server, "qa", "a", [quota("A100", 2)], cohort="c")
    queue(server, "qb", "b", [quota("A100", 2)], cohort="c")
    held = submit(server, b, "A100:4", queue="qb")  # b borrows a's two
    server.schedule()
    waits = submit(server, a, "A100:4", queue="qa")  # admissible (2 + 2), waits for room
    server.schedule()
    assert job(server, waits["id"])["state"] == "pending"
    assert not job(server, waits["id"])["reason"].startswith("inadmissible")

    queue(server, "qb", "b", [quota("A100", 0)], cohort="c")  # another queue of the cohort
    server.schedule()
    got = job(server, waits["id"])
    assert got["state"] == "pending"
    assert got["reason"] == (
        "inadmissible: A100: devices quota: 4 asked > 2 nominal + 0 borrowable at most"
    )
    assert got["events"][-1]["reason"] == got["reason"]  # an event says so, once
    server.schedule()
    assert sum(e["reason"] == got["reason"] for e in job(server, waits["id"])["events"]) == 1
    r = server.client.get("/v1/fleet/overview", headers=server.as_(a))
    assert r.json()["pending_by_reason"] == {"inadmissible: its queue's quota can never hold it": 1}

    queue(server, "qb", "b", [quota("A100", 2)], cohort="c")  # the cohort's quota is back
    server.schedule()  # decided again at once: admissible, waiting for b's borrowed cards
    again = job(server, waits["id"])
    assert again["state"] == "pending"
    assert not again["reason"].startswith("inadmissible"), again["reason"]
    assert again["events"][-1]["reason"] == again["reason"]  # leaving the mark is an event too
    server.client.post(f"/v1/jobs/{held['id']}/cancel", headers=server.as_(b))
    server.schedule()
    done = job(server, waits["id"])
    assert done["state"] == "scheduled"
    assert not any(
        e["reason"].startswith("inadmissible") for e in done["events"][-2:]
    )  # it left the mark with its next event
