"""The server's side of supervisors and leases (issue 20, part 3): reports carry their attempt,
a run reported after a restart is adopted, a replica its lease stopped is requeued at once, and
log chunks sent again add nothing."""

from __future__ import annotations

import pytest
from server_kit import Server, heartbeat, job, node, report, submit, tenant


def _running(server: Server) -> tuple[int, str]:
    node(server, "n1", count=1)
    a = tenant(server, "a")
    j = submit(server, a, "A100:1")
    server.schedule()
    heartbeat(server, "n1")  # handed out: attempt 1
    heartbeat(server, "n1", [{**report(j["id"], 0, "running"), "attempt": 1}])
    assert job(server, j["id"])["state"] == "running"
    return int(j["id"]), a


@pytest.mark.slow
def test_a_reported_run_after_a_restart_is_adopted_not_run_again(server: Server) -> None:
    job_id, _ = _running(server)
    server.plane.reload()  # as a server that starts again: nothing handed out by it yet
    for held in server.plane.held_jobs.values():
        held.dispatched = False
    reply = heartbeat(server, "n1", [{**report(job_id, 0, "running"), "attempt": 1}])
    assert [w["attempt"] for w in reply["run"]] == [1] and reply["stop"] == []
    got = job(server, job_id)
    assert got["attempts"] == 1 and got["state"] == "running"
    assert got["events"][-1]["reason"] == "attempt 1 adopted, still running on n1"
    assert reply["lease_s"] == 24.0 and reply["lease_grace_s"] == 10.0


@pytest.mark.slow
def test_a_report_of_another_attempt_is_not_the_jobs_and_is_told_to_stop(server: Server) -> None:
    job_id, _ = _running(server)
    reply = heartbeat(server, "n1", [{**report(job_id, 0, "failed", 1), "attempt": 7}])
    assert reply["stop"] == []  # not running: nothing to stop, and it changed nothing
    assert job(server, job_id)["state"] == "running"
    reply = heartbeat(server, "n1", [{**report(job_id, 0, "running"), "attempt": 7}])
    assert [job_id, 0] in reply["stop"]


@pytest.mark.slow
def test_a_replica_stopped_by_its_lease_is_requeued_at_once(server: Server) -> None:
    job_id, _ = _running(server)
    stopped = {**report(job_id, 0, "stopped"), "attempt": 1, "stop_cause": "lease_expired"}
    heartbeat(server, "n1", [stopped])
    got = job(server, job_id)
    assert got["state"] == "pending" and got["retries"] == 1
    assert "lease expired" in got["reason"]


@pytest.mark.slow
def test_log_chunks_sent_again_are_kept_once(server: Server) -> None:
    job_id, a = _running(server)
    url = f"/v1/agent/nodes/n1/jobs/{job_id}/replicas/0/logs"

    def send(chunk: bytes, offset: int, attempt: int = 1) -> int:
        params = {"offset": offset, "attempt": attempt}
        r = server.client.post(url, content=chunk, params=params, headers=server.admin)
        return r.status_code

    assert send(b"one\n", 0) == 204
    assert send(b"one\ntwo\n", 0) == 204  # an agent that restarted sends from the start
    assert send(b"two\nthree\n", 4) == 204
    assert send(b"old run\n", 0, attempt=2) == 204  # not the job's attempt: dropped
    assert send(b"x", -1) == 422  # refused, and nothing stored
    r = server.client.get(f"/v1/jobs/{job_id}/logs", headers=server.as_(a))
    assert r.text == "one\ntwo\nthree\n"
