"""Retries, backoff, max runtime and retention on the in-process plane (the clock moved by hand);
the same with real processes is in tests/integration/test_job_limits_real_processes.py."""

from __future__ import annotations

import pytest
from server_kit import (
    Server,
    heartbeat,
    job,
    node,
    report,
    row_counts,
    states,
    submit,
    tenant,
)

from xpupool.server.retention import Retention
from xpupool.server.services.job_limits import FinishedSweep, stop_overdue, sweep_finished


def run_once(server: Server, job_id: int, code: int) -> None:
    """Place, hand out, start and end one run of ``job_id`` with exit ``code``."""
    assert server.schedule() == 1
    heartbeat(server, "n1")
    heartbeat(server, "n1", [report(job_id, 0, "running")])
    heartbeat(server, "n1", [report(job_id, 0, "succeeded" if code == 0 else "failed", code)])


@pytest.mark.slow
def test_a_failing_job_runs_again_after_a_growing_wait_then_fails(server: Server) -> None:
    node(server, "n1")
    a = tenant(server, "a")
    j = submit(server, a, "A100", max_retries=2, retry_on=["exit_nonzero"], retry_backoff_s=10)[
        "id"
    ]
    waits = []
    for attempt in (1, 2):
        run_once(server, j, 1)
        got = job(server, j)
        assert got["state"] == "pending" and got["retries"] == attempt
        waits.append(got["not_before"] - server.clock.now)
        assert server.schedule() == 0  # not before its backoff
        server.clock.advance(got["not_before"] - server.clock.now + 0.1)
    assert waits == [10.0, 20.0]
    run_once(server, j, 1)
    got = job(server, j)
    assert got["state"] == "failed" and got["attempts"] == 3 and got["exit_code"] == 1
    assert got["not_before"] is None  # its last wait ended when it was admitted
    assert got["stop_cause"] == "replica_failed" and "no retries left" in got["reason"]


@pytest.mark.slow
def test_by_default_a_non_zero_exit_is_not_retried(server: Server) -> None:
    node(server, "n1")
    j = submit(server, tenant(server, "a"), "A100")["id"]
    run_once(server, j, 3)
    got = job(server, j)
    assert got["state"] == "failed" and got["attempts"] == 1 and got["retries"] == 0
    assert got["retry_on"] == ["node_lost", "preempted"]


@pytest.mark.slow
def test_a_run_past_its_max_runtime_is_stopped_and_fails(server: Server) -> None:
    node(server, "n1")
    j = submit(server, tenant(server, "a"), "A100", max_runtime_s=30)["id"]
    server.schedule()
    heartbeat(server, "n1")
    heartbeat(server, "n1", [report(j, 0, "running")])
    server.clock.advance(29)
    assert stop_overdue(server.plane) == []
    server.clock.advance(2)
    assert stop_overdue(server.plane) == [j]
    assert stop_overdue(server.plane) == []  # being stopped: asked once
    reply = heartbeat(server, "n1", [report(j, 0, "running")])
    assert reply["stop"] == [[j, 0]]
    heartbeat(server, "n1", [report(j, 0, "stopped", 143)])
    got = job(server, j)
    assert got["state"] == "failed" and got["stop_cause"] == "max_runtime"
    assert "max_runtime_s (30 s)" in got["reason"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"max_retries": -1}, "max_retries"),
        ({"retry_on": ["exit_zero"]}, "retry_on"),
        ({"retry_on": ["preempted", "preempted"]}, "retry_on"),
        ({"retry_on": ["node_lost"], "on_node_lost": "fail"}, "retry_on"),
        ({"max_runtime_s": 0}, "max_runtime_s"),
        ({"retry_backoff_s": 10, "retry_backoff_max_s": 5}, "retry_backoff_max_s"),
    ],
)
@pytest.mark.slow
def test_bad_limits_are_refused_naming_the_field(
    server: Server, body: dict[str, object], field: str
) -> None:
    a = tenant(server, "a")
    before = row_counts(server)
    r = server.client.post("/v1/jobs", json={"command": ["true"], **body}, headers=server.as_(a))
    assert r.status_code == 422, r.text
    assert r.json()["field"].startswith(field)
    assert row_counts(server) == before


@pytest.mark.slow
def test_retention_forgets_old_finished_jobs_with_their_logs_only(server: Server) -> None:
    node(server, "n1", count=1)
    a = tenant(server, "a")
    done = submit(server, a, "A100")["id"]
    run_once(server, done, 0)
    server.plane.log_path(done, 0).parent.mkdir(parents=True, exist_ok=True)
    server.plane.log_path(done, 0).write_text("out\n")
    running = submit(server, a, "A100")["id"]
    server.schedule()
    heartbeat(server, "n1")
    heartbeat(server, "n1", [report(running, 0, "running")])
    waiting = submit(server, a, "A100")["id"]  # the only card is taken: it stays pending
    server.schedule()
    assert job(server, waiting)["state"] == "pending"
    keep = Retention(seconds=3600, jobs=None)
    assert sweep_finished(server.plane, keep) == []
    server.clock.advance(3601)
    assert sweep_finished(server.plane, keep) == [done]
    assert server.client.get(f"/v1/jobs/{done}", headers=server.admin).status_code == 404
    assert not server.plane.log_path(done, 0).parent.exists()
    assert states(server, running)[-1] == "running" and job(server, waiting)["state"] == "pending"
    later = submit(server, a, "A100")["id"]
    assert later > waiting  # ids are never handed out again


@pytest.mark.slow
def test_retention_by_count_keeps_the_newest_finished_jobs(server: Server) -> None:
    node(server, "n1")
    a = tenant(server, "a")
    ids = []
    for _ in range(3):
        ids.append(submit(server, a, "A100")["id"])
        run_once(server, ids[-1], 0)
        server.clock.advance(1)
    assert sweep_finished(server.plane, Retention(seconds=None, jobs=2)) == [ids[0]]
    assert [job(server, i)["state"] for i in ids[1:]] == ["succeeded", "succeeded"]


@pytest.mark.slow
def test_retention_by_count_counts_each_tenant_apart(server: Server) -> None:
    """Issue 43, item 7: one tenant's churn (jobs submitted and cancelled) pushed another
    tenant's finished jobs out of a global count. The count is per tenant: each tenant's own
    oldest go, and another tenant's jobs and logs stay."""
    node(server, "n1")
    a, b = tenant(server, "a"), tenant(server, "b")
    kept = []
    for _ in range(2):
        kept.append(submit(server, b, "A100")["id"])
        run_once(server, kept[-1], 0)
        server.plane.log_path(kept[-1], 0).parent.mkdir(parents=True, exist_ok=True)
        server.plane.log_path(kept[-1], 0).write_text("b's output\n")
        server.clock.advance(1)
    churn = []
    for _ in range(6):
        churn.append(submit(server, a, "A100")["id"])
        r = server.client.post(f"/v1/jobs/{churn[-1]}/cancel", headers=server.as_(a))
        assert r.status_code == 200, r.text
        server.clock.advance(1)
    forgotten = sweep_finished(server.plane, Retention(seconds=None, jobs=3))
    assert forgotten == churn[:3]  # a's oldest, down to its own 3
    for j in kept:
        assert job(server, j)["state"] == "succeeded"
        assert server.plane.log_path(j, 0).read_text() == "b's output\n"
    assert sweep_finished(server.plane, Retention(seconds=None, jobs=3)) == []


@pytest.mark.slow
def test_a_running_sweep_reads_what_changed_since_its_last_pass(server: Server) -> None:
    """The watch thread's sweep counts again only the tenants with jobs finished since its last
    pass (their final events), and looks at the age limit every tenth of it."""
    node(server, "n1")
    a, b = tenant(server, "a"), tenant(server, "b")
    sweep = FinishedSweep(server.plane, Retention(seconds=3600, jobs=2))
    done_b = submit(server, b, "A100")["id"]
    run_once(server, done_b, 0)
    assert sweep.sweep() == []
    churn = []
    for _ in range(4):
        churn.append(submit(server, a, "A100")["id"])
        server.client.post(f"/v1/jobs/{churn[-1]}/cancel", headers=server.as_(a))
        server.clock.advance(1)
    assert sweep.sweep() == churn[:2]
    assert sweep.sweep() == []
    server.clock.advance(3600 - 4 + 1)  # b's job is past the age limit; a's two are not
    assert sweep.sweep() == [done_b]
    server.clock.advance(3)
    assert sweep.sweep() == []  # the age was looked at 3 s ago: next look after 360 s
    server.clock.advance(360)
    assert sweep.sweep() == churn[2:]


@pytest.mark.slow
def test_a_replica_its_agent_no_longer_reports_runs_again_as_the_next_attempt(
    server: Server,
) -> None:
    """An agent that restarted lost its replicas with it: the server hands the replica out
    again as attempt 2, and its log gets the attempt line before the new run's output."""
    node(server, "n1")
    j = submit(server, tenant(server, "a"), "A100")["id"]
    server.schedule()
    assert [w["attempt"] for w in heartbeat(server, "n1")["run"]] == [1]
    assert heartbeat(server, "n1", [report(j, 0, "running")])["run"][0]["attempt"] == 1
    again = heartbeat(server, "n1")  # the agent restarted: it reports nothing
    assert [w["attempt"] for w in again["run"]] == [2]
    assert job(server, j)["attempts"] == 2
    assert server.plane.log_path(j, 0).read_text() == "[xpupool: attempt 2]\n"
    assert heartbeat(server, "n1", [report(j, 0, "running")])["run"][0]["attempt"] == 2
    assert job(server, j)["attempts"] == 2  # reported again: the same run
