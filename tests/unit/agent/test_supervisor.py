"""A replica's supervisor with real processes: the lease it holds, and who an agent that starts
again takes back (issue 20, part 3)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from agent_work import poll_until, settings, started, work

from xpupool.agent import replica_dir as rd
from xpupool.agent.runner import Runner, group_alive

SLEEP = [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"]


def _kill(pid: int | None) -> None:
    if pid:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
def test_a_lease_not_renewed_stops_the_replica(tmp_path: Path) -> None:
    runner = Runner("n1", tmp_path, grace_s=0.5, settings=settings(tmp_path))
    runner.renew(time.monotonic() + 3.0, grace_s=0.5)  # as after one heartbeat answered
    rep = started(runner.start(work(SLEEP)), runner)
    assert rep is not None and rep.pid is not None and rep.status is not None
    try:
        poll_until(lambda: rep.log_path.exists() and b"up" in rep.log_path.read_bytes(), runner)
        assert runner.reports()[0].state == "running"
        # no renewal: the supervisor stops the replica at the lease's end, alone
        poll_until(lambda: rep.state == "stopped", runner, timeout_s=20)
        report = runner.reports()[0]
        assert report.stop_cause == "lease_expired"
        assert "lease expired" in report.reason
        assert not group_alive(rep.pid)
    finally:
        _kill(rep.pid)
        _kill(rep.status.supervisor_pid)


@pytest.mark.slow
def test_a_renewed_lease_keeps_the_replica_running(tmp_path: Path) -> None:
    runner = Runner("n1", tmp_path, grace_s=0.5, settings=settings(tmp_path))
    runner.renew(time.monotonic() + 5.0, grace_s=0.5)
    rep = started(runner.start(work(SLEEP)), runner)
    assert rep is not None and rep.pid is not None and rep.status is not None
    try:
        deadline = time.monotonic() + 4.0
        while time.monotonic() < deadline:  # four lease lengths, renewed all along
            runner.renew(time.monotonic() + 1.0)
            runner.poll()
            time.sleep(0.1)
        assert rep.state == "running" and group_alive(rep.pid)
    finally:
        runner.shutdown(timeout_s=5)
        _kill(rep.status.supervisor_pid)


@pytest.mark.slow
def test_an_agent_that_starts_again_adopts_its_supervisors_and_no_reused_pid(
    tmp_path: Path,
) -> None:
    first = Runner("n1", tmp_path, settings=settings(tmp_path))
    rep = started(first.start(work(SLEEP)), first)
    assert rep is not None and rep.pid is not None and rep.status is not None
    poll_until(lambda: rep.log_path.exists() and b"up" in rep.log_path.read_bytes(), first)
    first.ship_logs(lambda *_: None)
    shipped = rep.shipped
    # a second run whose status names a live process that is not its supervisor (a pid reused)
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        fake = rd.ReplicaDir.under(tmp_path, 8, 0, 1)
        fake.path.mkdir(parents=True)
        rd.write_atomic(fake.work, work(SLEEP, job_id=8).model_dump_json().encode())
        since = rd.process_started(stranger.pid)
        assert since is not None
        rd.write_status(
            fake,
            rd.SupervisorStatus(stranger.pid, since, 1, state="running", replica_pid=stranger.pid),
        )
        again = Runner("n1", tmp_path, settings=settings(tmp_path))  # the agent restarted
        assert set(again.replicas) == {(7, 0)}
        adopted = again.replicas[(7, 0)]
        assert (adopted.state, adopted.pid) == ("running", rep.pid)
        assert adopted.report().attempt == 1
        offsets: list[int] = []
        again.ship_logs(lambda job, replica, chunk, offset, attempt: offsets.append(offset))
        assert shipped > 0 and all(o >= shipped for o in offsets)  # resumed, nothing sent again
        assert stranger.poll() is None  # not signalled: it is not ours
        assert not fake.path.exists()
        again.stop(7, 0)  # a stop goes through the adopted supervisor
        poll_until(lambda: adopted.state == "stopped", again)
        assert not group_alive(rep.pid)
    finally:
        stranger.kill()
        stranger.wait(5)
        _kill(rep.pid)
        _kill(rep.status.supervisor_pid)


@pytest.mark.slow
def test_a_result_that_came_while_the_agent_was_away_is_reported(tmp_path: Path) -> None:
    first = Runner("n1", tmp_path, settings=settings(tmp_path))
    rep = started(first.start(work([sys.executable, "-c", "print('done')"])), first)
    assert rep is not None and rep.status is not None
    poll_until(lambda: rep.state == "succeeded", first)
    again = Runner("n1", tmp_path, settings=settings(tmp_path))
    report = again.reports()[0]
    assert (report.state, report.exit_code, report.attempt) == ("succeeded", 0, 1)
    sent: list[bytes] = []
    again.ship_logs(lambda job, replica, chunk, offset, attempt: sent.append(chunk))
    again.acknowledge([report])
    assert b"done" in b"".join(sent) and again.replicas == {}
    run = rd.ReplicaDir.under(tmp_path, 7, 0, 1)
    deadline = time.monotonic() + 10
    while run.path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not run.path.exists()  # collected: the supervisor removed it and left


@pytest.mark.slow
def test_a_lease_over_before_the_start_starts_nothing_and_says_why(tmp_path: Path) -> None:
    runner = Runner("n1", tmp_path, settings=settings(tmp_path))
    runner.renew(time.monotonic() - 1.0)  # the agent lost the server before the supervisor ran
    rep = started(runner.start(work(SLEEP)), runner)
    poll_until(lambda: rep.state == "stopped", runner)
    report = runner.reports()[0]
    assert report.pid is None and report.stop_cause == "lease_expired"  # requeued, not failed
