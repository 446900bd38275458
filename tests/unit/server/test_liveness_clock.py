"""Node liveness and the requeue of a silent node's jobs count the server's monotonic time, never
wall-clock differences (issue 43, item 9): a step of the wall clock (NTP, ``date -s``) neither
makes a heartbeating node lost nor hides a silent one, and after a restart every node has its full
grace from the restart. The plane's two clocks are injected (``server_kit.FakeClock``):
``advance`` is time passing, ``step`` a wall-clock step alone."""

from __future__ import annotations

import pytest
from server_kit import Server, heartbeat, job, node, reopen, report, submit, tenant

from xpupool.server.services.agents import heartbeat_idle, mark_lost_nodes


def _running_on_a_node(server: Server) -> tuple[int, str]:
    """One job running on node n1 (reported so by its heartbeat): (job id, node)."""
    node(server, "n1", count=2)
    token = tenant(server, "a")
    j = submit(server, token, "A100:1")
    server.schedule()
    heartbeat(server, "n1", [report(j["id"], 0, "running")])
    assert job(server, j["id"])["state"] == "running"
    return int(j["id"]), "n1"


def _node_status(server: Server, name: str) -> str:
    r = server.client.get(f"/v1/nodes/{name}", headers=server.admin)
    assert r.status_code == 200, r.text
    return str(r.json()["status"])


@pytest.mark.slow
def test_a_forward_wall_clock_step_loses_no_heartbeating_node(server: Server) -> None:
    job_id, where = _running_on_a_node(server)
    server.clock.advance(2)
    server.clock.step(3600)  # the wall clock jumps an hour ahead between two heartbeats
    assert mark_lost_nodes(server.plane) == []
    assert _node_status(server, where) == "ready"
    got = job(server, job_id)
    assert got["state"] == "running" and got["attempts"] == 1 and got["retries"] == 0
    heartbeat(server, where, [report(job_id, 0, "running")])
    server.clock.advance(server.plane.lost_after_s - 1)  # silent, but not for long enough
    assert mark_lost_nodes(server.plane) == []
    assert job(server, job_id)["state"] == "running"


def test_a_wall_clock_step_does_not_lose_an_idle_heartbeating_node(server: Server) -> None:
    """The in-process agent's idle heartbeats (``heartbeat_idle``) count the same way."""
    node(server, "n1", count=1)
    heartbeat_idle(server.plane, ["n1"])
    server.clock.step(3600)
    assert mark_lost_nodes(server.plane) == []
    heartbeat_idle(server.plane, ["n1"])
    server.clock.step(-7200)
    server.clock.advance(server.plane.lost_after_s + 1)
    assert mark_lost_nodes(server.plane) == ["n1"]


@pytest.mark.slow
def test_a_backward_wall_clock_step_does_not_hide_a_silent_node(server: Server) -> None:
    job_id, where = _running_on_a_node(server)
    server.clock.step(-3600)  # an hour back, and the node's agent is gone
    server.clock.advance(server.plane.lost_after_s + 1)
    assert mark_lost_nodes(server.plane) == [where]
    assert job(server, job_id)["state"] == "running"  # its lease may not be over yet
    server.clock.advance(server.plane.lease.requeue_after_s)
    mark_lost_nodes(server.plane)
    got = job(server, job_id)
    assert got["state"] == "pending" and f"node {where} lost" in got["reason"]


@pytest.mark.slow
def test_after_a_restart_liveness_counts_from_the_restart(server: Server) -> None:
    """A restart is not the agents' fault: a node silent since before it has its full grace
    from the restart, whatever the wall clock did meanwhile; the last heartbeat shown is still
    the one stored."""
    job_id, where = _running_on_a_node(server)
    seen = server.client.get(f"/v1/nodes/{where}", headers=server.admin).json()["last_heartbeat"]
    server.clock.advance(server.plane.lost_after_s - 5)
    server.clock.step(3600)
    restarted = reopen(server)
    with restarted.client:
        shown = restarted.client.get(f"/v1/nodes/{where}", headers=restarted.admin).json()
        assert shown["last_heartbeat"] == seen
        restarted.clock.advance(restarted.plane.lost_after_s - 1)
        assert mark_lost_nodes(restarted.plane) == []
        restarted.clock.advance(2)
        assert mark_lost_nodes(restarted.plane) == [where]
        restarted.clock.advance(restarted.plane.lease.requeue_after_s)
        mark_lost_nodes(restarted.plane)
        assert job(restarted, job_id)["state"] == "pending"
    restarted.plane.db.dispose()
