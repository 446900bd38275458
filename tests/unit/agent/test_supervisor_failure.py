"""A supervisor that fails before the replica's own process starts: the replica's reason names
the supervisor and what went wrong, read back from the supervisor's own output, and its exit
code is empty (issue 42: every job of a fresh install said "exited with 0: its supervisor ended
before it did" while the supervisor's traceback lay unread in ``supervisor.log``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from agent_work import poll_until, settings, work

from xpupool.agent.runner import Runner

ECHO = [sys.executable, "-c", "print('hello')"]


def _failing(stderr: str) -> tuple[str, ...]:
    """A supervisor command that writes ``stderr`` and exits 1 without a status (the runner
    appends DIR and ATTEMPT, which it ignores)."""
    return (sys.executable, "-c", f"import sys; sys.stderr.write({stderr!r}); sys.exit(1)")


@pytest.mark.slow
def test_the_supervisor_says_in_one_line_why_it_cannot_run(tmp_path: Path) -> None:
    missing = tmp_path / "gone" / "7.0.1"
    done = subprocess.run(
        [sys.executable, "-m", "xpupool.agent.supervisor", str(missing), "1"],
        capture_output=True,
        text=True,
        cwd="/",
        timeout=60,
    )
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"supervisor: cannot write {missing / 'status.json'}: No such file or directory"
    ]


def test_its_last_words_become_the_reason_and_the_exit_code_stays_empty(tmp_path: Path) -> None:
    said = "supervisor: cannot write /x/status.json: No such file or directory\n"
    runner = Runner("n1", tmp_path, settings=settings(tmp_path), supervisor=_failing(said))
    rep = runner.start(work(ECHO))
    assert rep is not None
    poll_until(lambda: rep.state != "running", runner)
    (report,) = runner.reports()
    assert report.state == "failed" and report.exit_code is None and report.pid is None
    assert report.reason == said.strip()


def test_an_unexpected_error_is_named_as_the_supervisors(tmp_path: Path) -> None:
    trace = "Traceback (most recent call last):\n  ...\nRuntimeError: boom\n"
    runner = Runner("n1", tmp_path, settings=settings(tmp_path), supervisor=_failing(trace))
    rep = runner.start(work(ECHO))
    assert rep is not None
    poll_until(lambda: rep.state != "running", runner)
    assert runner.reports()[0].reason == "supervisor: RuntimeError: boom"


def test_a_supervisor_killed_before_the_replica_started_says_so(tmp_path: Path) -> None:
    runner = Runner("n1", tmp_path, settings=settings(tmp_path))
    rep = runner.start(work(ECHO))
    assert rep is not None and rep.supervisor is not None
    os.kill(rep.supervisor.pid, signal.SIGKILL)  # long before it has imported what it needs
    poll_until(lambda: rep.state != "running", runner)
    (report,) = runner.reports()
    assert report.state == "failed" and report.exit_code is None
    assert report.reason == "supervisor: killed by SIGKILL before it started the replica"
