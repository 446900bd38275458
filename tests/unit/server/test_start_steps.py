"""A replica's start step in its job's events (issue 45 part 3: a pull a user can follow): the
agent reports each replica it is still starting with the step it is at (``StartingReport``), and
the server records a step once, when it changes, at most every ``STEP_EVENT_EVERY_S`` while the
same run lasts. The agent's side, through a real supervisor: tests/unit/agent/test_container_pull.py.
"""

from __future__ import annotations

from typing import Any

import httpx
from server_kit import Server, job, node, report, row_counts, submit, tenant

from xpupool.server.services.agents import STEP_EVENT_EVERY_S


def beat(
    srv: Server, starting: list[dict[str, Any]], replicas: list[dict[str, Any]] | None = None
) -> httpx.Response:
    body = {"node": "n1", "replicas": replicas or [], "starting": starting}
    return srv.client.post("/v1/agent/heartbeat", json=body, headers=srv.admin)


def step(job_id: int, text: str, attempt: int | None = 1) -> dict[str, Any]:
    return {"job_id": job_id, "replica": 0, "attempt": attempt, "step": text}


def reasons(srv: Server, job_id: int) -> list[str]:
    return [e["reason"] for e in job(srv, job_id)["events"]]


def test_a_pull_is_followed_in_the_jobs_events_while_it_lasts(server: Server) -> None:
    node(server, "n1", runtime="podman")
    j = submit(server, tenant(server, "a"), "A100", image="reg/x:1")["id"]
    server.schedule()
    assert beat(server, []).status_code == 200  # handed out: the agent starts pulling
    assert beat(server, [step(j, "pulling reg/x:1")]).status_code == 200
    assert "replica 0: pulling reg/x:1" in reasons(server, j)
    # the same step again, and a changed one too soon after: one event so far
    beat(server, [step(j, "pulling reg/x:1")])
    beat(server, [step(j, "pulling reg/x:1: 2 layers copied")])
    assert sum("pulling" in r for r in reasons(server, j)) == 1
    server.clock.advance(STEP_EVENT_EVERY_S)
    beat(server, [step(j, "pulling reg/x:1: 3 layers copied")])
    got = job(server, j)
    assert "replica 0: pulling reg/x:1: 3 layers copied" in [e["reason"] for e in got["events"]]
    assert got["state"] == "scheduled"  # a step is not a start: the first report is
    started = {**report(j, 0, "running"), "pid": 4242, "attempt": 1}
    assert beat(server, [], [started]).status_code == 200
    assert job(server, j)["state"] == "running"


def test_a_step_of_a_replica_the_node_does_not_hold_changes_nothing(server: Server) -> None:
    node(server, "n2", runtime="podman")
    j = submit(server, tenant(server, "a"), "A100", image="reg/x:1")["id"]
    server.schedule()  # on n2, the only node
    node(server, "n1", runtime="podman")
    before, shown = row_counts(server), job(server, j)
    for forged in (step(j, "pulling evil"), step(j + 99, "x"), step(j, "pulling", attempt=7)):
        assert beat(server, [forged]).status_code == 200
    assert row_counts(server) == before and job(server, j)["events"] == shown["events"]


def test_a_bad_step_is_refused_naming_the_field_and_nothing_changes(server: Server) -> None:
    node(server, "n1", runtime="podman")
    j = submit(server, tenant(server, "a"), "A100", image="reg/x:1")["id"]
    server.schedule()
    before = row_counts(server)
    for bad, field in (
        (step(j, ""), "step"),
        (step(j, "x" * 5000), "step"),
        ({**step(j, "pulling"), "replica": -1}, "replica"),
    ):
        r = beat(server, [bad])
        assert r.status_code == 422 and field in r.text, r.text
    too_many = [step(j, "pulling")] * 300
    r = beat(server, too_many)
    assert r.status_code == 422 and "starting" in r.text, r.text
    assert row_counts(server) == before
