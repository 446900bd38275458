"""Checkpoint-aware preemption through the API: the job that loses least since its checkpoint
goes, a job inside its min-run stays unless the preemptor's queue says otherwise, and only a
running job's owner reports its checkpoint."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from server_kit import (
    Server,
    heartbeat,
    job,
    node,
    queue,
    reopen,
    report,
    row_counts,
    submit,
    tenant,
)

from xpupool.cli import main


def run_for(server: Server, seconds: float, running: list[int]) -> None:
    """Let ``seconds`` pass, the node heartbeating its running replicas (it is lost after 30 s)."""
    while seconds > 0:
        step = min(seconds, 10.0)
        server.clock.advance(step)
        heartbeat(server, "n1", [report(i, 0, "running") for i in running])
        seconds -= step


def two_running(server: Server, spec: str = "A100:1") -> tuple[str, list[int]]:
    node(server, "n1", count=2)
    a = tenant(server, "a")
    queue(server, "a", "a", [], max_priority=10)
    low = [submit(server, a, spec)["id"] for _ in range(2)]
    server.schedule()
    heartbeat(server, "n1", [report(i, 0, "running") for i in low])
    return a, low


def victim_of(server: Server, low: list[int]) -> int:
    return next(i for i in low if job(server, i)["reason"].startswith("stopping"))


@pytest.mark.slow
def test_the_job_that_checkpointed_goes_not_the_one_that_would_lose_its_run(
    server: Server,
) -> None:
    a, low = two_running(server)
    older = low[0]  # today's planner spares the older and takes the newer (low[1])
    run_for(server, 100, low)
    r = server.client.post(f"/v1/jobs/{older}/checkpoint", headers=server.as_(a))
    assert r.status_code == 200, r.text
    assert r.json() == {"job_id": older, "at": server.clock.now}
    run_for(server, 60, low)
    submit(server, a, "A100:1", priority=10)
    server.schedule()
    assert victim_of(server, low) == older
    events = job(server, older)["events"]
    assert "lost 1.0 card-min since its checkpoint" in events[-1]["reason"]


@pytest.mark.slow
def test_min_run_keeps_a_job_unless_the_preemptors_queue_preempts_min_run(
    server: Server,
) -> None:
    a, low = two_running(server, "A100:1 min-run=10m")
    run_for(server, 60, low)
    high = submit(server, a, "A100:1", priority=10)
    server.schedule()
    assert job(server, high["id"])["state"] == "pending"
    assert not any(job(server, i)["reason"].startswith("stopping") for i in low)
    queue(server, "a", "a", [], max_priority=10, preempts_min_run=True)
    assert server.client.get("/v1/queues/a", headers=server.admin).json()["preempts_min_run"]
    server.schedule()
    assert (
        "lost 1.0 card-min of run time (no checkpoint)"
        in (job(server, victim_of(server, low))["events"][-1]["reason"])
    )


@pytest.mark.slow
def test_only_a_running_jobs_owner_reports_its_checkpoint(server: Server) -> None:
    a, low = two_running(server)
    b = tenant(server, "b")
    r = server.client.post(f"/v1/jobs/{low[0]}/checkpoint", headers=server.as_(b))
    assert r.status_code == 404
    pending = submit(server, a, "A100:1")["id"]  # no room: it waits
    server.schedule()
    r = server.client.post(f"/v1/jobs/{pending}/checkpoint", headers=server.as_(a))
    assert r.status_code == 409 and "not running" in r.text


@pytest.mark.slow
def test_a_checkpoint_reported_with_the_replica_counts_as_one_through_the_api(
    server: Server,
) -> None:
    _, low = two_running(server)
    older = low[0]  # today's planner spares the older and takes the newer (low[1])
    run_for(server, 100, low)
    running = [report(i, 0, "running") for i in low]
    running[0]["checkpoint_age_s"] = 20.0  # the agent saw its file written 20 s ago
    heartbeat(server, "n1", running)
    a2 = tenant(server, "b")
    queue(server, "b", "b", [], max_priority=10)
    submit(server, a2, "A100:1", queue="b", priority=10)
    server.schedule()
    assert victim_of(server, low) == older
    assert "lost 0.3 card-min since its checkpoint" in job(server, older)["events"][-1]["reason"]


@pytest.mark.slow
def test_a_checkpoint_dated_before_the_plane_heard_of_the_start_counts_from_the_start(
    server: Server,
) -> None:
    """A job that saves as it starts reports a file older than the start the plane recorded (the
    report comes later); it was dropped, and the job counted as never checkpointed."""
    _, low = two_running(server)
    started = server.clock.now
    assert job(server, low[0])["checkpoint_at"] is None
    run_for(server, 30, low)
    running = [report(i, 0, "running") for i in low]
    running[0]["checkpoint_age_s"] = 300.0  # older than the run, as the plane counts it
    heartbeat(server, "n1", running)
    assert job(server, low[0])["checkpoint_at"] == started


@pytest.mark.slow
def test_a_restarted_plane_still_knows_the_checkpoint(server: Server) -> None:
    """The checkpoint is in the job's row: a restarted plane's planner still takes the job that
    checkpointed, not the one that would lose its whole run."""
    a, low = two_running(server)
    older = low[0]
    run_for(server, 100, low)
    r = server.client.post(f"/v1/jobs/{older}/checkpoint", headers=server.as_(a))
    assert r.status_code == 200, r.text
    at = r.json()["at"]
    again = reopen(server)
    try:
        with again.client:
            assert job(again, older)["checkpoint_at"] == at
            run_for(again, 60, low)
            submit(again, a, "A100:1", priority=10)
            again.schedule()
            assert victim_of(again, low) == older
    finally:
        again.plane.db.dispose()


def test_a_grace_above_the_servers_most_is_refused_naming_it(server: Server) -> None:
    """``up --max-grace``: a longer grace is refused at submission, naming the field and the
    server's most, and nothing is stored; one within it is taken."""
    node(server, "n1", count=1)
    a = tenant(server, "a")
    server.plane.max_grace_s = 60.0
    before = row_counts(server)
    r = server.client.post(
        "/v1/jobs", json={"request": "A100:1 grace=2m", "command": ["true"]}, headers=server.as_(a)
    )
    assert r.status_code == 422, r.text
    assert r.json()["field"] == "request.grace"
    assert "at most 1m on this server" in r.text
    assert row_counts(server) == before
    assert submit(server, a, "A100:1 grace=1m")["request"]["grace"] == "1m"


@pytest.mark.parametrize("bad", ["soon", "0s", "2h"])
def test_up_refuses_a_bad_max_grace(bad: str, tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["up", "--data", str(tmp_path), "--max-grace", bad])
    assert result.exit_code == 2, result.output
    assert "--max-grace" in result.output
    assert not any(tmp_path.iterdir())  # refused before anything was written
