"""Elastic jobs on a server's agent sites (issue 54 part 1, ``server/plane/elastic_runs.py``): a
running elastic job grows one replica per pass into idle cards, stored and handed to its agent
with its size and ranks; a job needing room shrinks it (its highest replicas stopped, freed only
when the agent reports them gone, the pending job waiting for that); a restarted plane holds the
same replicas and shrinks them as extras."""

from __future__ import annotations

from typing import Any

import pytest
from server_kit import Server, heartbeat, job, node, reopen, report, submit, tenant


def reasons(server: Server, job_id: int) -> list[str]:
    return [e["reason"] for e in job(server, job_id)["events"]]


def replicas_of(server: Server, job_id: int) -> list[int]:
    return sorted(a["replica"] for a in job(server, job_id)["assignments"])


def worlds(reply: dict[str, Any], job_id: int) -> dict[int, dict[str, Any]]:
    """The elastic world handed with each replica of ``job_id`` in a heartbeat's reply."""
    return {w["replica"]: w["elastic"] for w in reply["run"] if w["job_id"] == job_id}


def running(job_id: int, replicas: list[int]) -> list[dict[str, Any]]:
    return [report(job_id, r, "running") for r in replicas]


def grown_to_four(server: Server) -> tuple[str, int]:
    """An elastic job (2..4 on a node of 4 cards), running, grown to its maximum."""
    node(server, "n1", count=4)
    a = tenant(server, "a")
    j = submit(server, a, "A100:1 replicas=2..4")["id"]
    assert server.schedule() == 1
    heartbeat(server, "n1", running(j, [0, 1]))
    server.schedule()  # one replica more per pass
    server.schedule()
    return a, j


@pytest.mark.slow
def test_a_running_elastic_job_grows_into_idle_cards_one_replica_per_pass(server: Server) -> None:
    node(server, "n1", count=4)
    a = tenant(server, "a")
    j = submit(server, a, "A100:1 replicas=2..4")["id"]
    assert server.schedule() == 1
    assert replicas_of(server, j) == [0, 1]  # not running yet: it does not grow
    first = heartbeat(server, "n1", running(j, [0, 1]))
    server.schedule()
    assert replicas_of(server, j) == [0, 1, 2]
    assert worlds(first, j)[1]["replicas"] == 2 and worlds(first, j)[1]["rank"] == 1
    assert "grew to 3 of 4 replicas into idle capacity (replica 2 on n1)" in reasons(server, j)
    server.schedule()
    server.schedule()  # at its maximum: no more
    assert replicas_of(server, j) == [0, 1, 2, 3]
    reply = heartbeat(server, "n1", running(j, [0, 1]))
    world = worlds(reply, j)
    assert sorted(world) == [0, 1, 2, 3]  # the grown replicas are handed out like any
    assert {w["replicas"] for w in world.values()} == {4}
    assert [world[r]["rank"] for r in range(4)] == [0, 1, 2, 3]
    assert [m["replica"] for m in world[0]["members"]] == [0, 1, 2, 3]
    assert world[0]["min_replicas"] == 2 and world[0]["max_replicas"] == 4
    logs = f"/v1/jobs/{j}/logs"
    r = server.client.get(logs, params={"replica": 3}, headers=server.as_(a))
    assert r.status_code == 200, r.text  # a grown replica's log is read as any (was 422)
    r = server.client.get(logs, params={"replica": 4}, headers=server.as_(a))
    assert r.status_code == 422 and r.json()["field"] == "replica"


@pytest.mark.slow
def test_a_job_needing_room_shrinks_the_highest_replicas_once_they_are_gone(
    server: Server,
) -> None:
    a, j = grown_to_four(server)
    other = submit(server, a, "A100:2")["id"]
    server.schedule()
    assert job(server, other)["state"] == "pending"
    assert "shrinking 2 extra replica(s) of elastic job(s)" in job(server, other)["reason"]
    assert f"shrinking to 2 replicas: stopping replica(s) 2, 3 (job {other} needs room)" in (
        reasons(server, j)
    )
    reply = heartbeat(server, "n1", running(j, [0, 1, 2, 3]))
    assert sorted(map(tuple, reply["stop"])) == [(j, 2), (j, 3)]
    assert {r: w["replicas"] for r, w in worlds(reply, j).items()} == {0: 2, 1: 2}
    server.schedule()  # the extras still run: their cards are not free yet, nothing else goes
    assert job(server, other)["state"] == "pending"
    assert replicas_of(server, j) == [0, 1, 2, 3]
    assert sum(r.startswith("shrinking to") for r in reasons(server, j)) == 1  # not twice
    stopped = [report(j, r, "stopped") for r in (2, 3)]
    heartbeat(server, "n1", [*running(j, [0, 1]), *stopped])
    assert replicas_of(server, j) == [0, 1]
    assert job(server, j)["state"] == "running"
    assert any(r.startswith("shrank to 2 replicas (at least 2)") for r in reasons(server, j))
    server.schedule()
    assert job(server, other)["state"] == "scheduled"


@pytest.mark.slow
def test_a_restarted_plane_holds_the_grown_replicas_and_shrinks_them_as_extras(
    server: Server,
) -> None:
    a, j = grown_to_four(server)
    again = reopen(server)
    try:
        with again.client:
            assert replicas_of(again, j) == [0, 1, 2, 3]
            other = submit(again, a, "A100:1")["id"]
            again.schedule()
            reply = heartbeat(again, "n1", running(j, [0, 1, 2, 3]))
            assert [tuple(s) for s in reply["stop"]] == [(j, 3)]  # the highest first
            heartbeat(again, "n1", [*running(j, [0, 1, 2]), report(j, 3, "stopped")])
            again.schedule()
            assert job(again, other)["state"] == "scheduled"
            assert replicas_of(again, j) == [0, 1, 2]
    finally:
        again.plane.db.dispose()
