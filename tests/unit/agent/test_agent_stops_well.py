"""A job's own stop terms, with real processes: its checkpoint signal before SIGTERM, its grace
between SIGTERM and SIGKILL (issue 54 part 2). No timing is asserted: the order of what the
process saw, and that it ran on after SIGTERM until it was killed."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from pathlib import Path

import pytest
from agent_work import poll_until, settings, started, work

from xpupool.agent.runner import Runner

TRAPS = [
    sys.executable,
    "-c",
    "import signal, time\n"
    "say = lambda word: print(word, flush=True)\n"
    "signal.signal(signal.SIGUSR1, lambda *_: say('usr1'))\n"
    "signal.signal(signal.SIGTERM, lambda *_: say('term'))\n"
    "say('up')\n"
    "while True:\n"
    "    say('tick'); time.sleep(0.1)\n",
]


def _kill(pid: int | None) -> None:
    if pid:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
@pytest.mark.parametrize("checkpoint_signal", ["USR1", None])
def test_checkpoint_signal_then_term_then_kill_after_the_jobs_grace(
    tmp_path: Path, checkpoint_signal: str | None
) -> None:
    runner = Runner("n1", tmp_path, grace_s=0.1, settings=settings(tmp_path))
    runner.renew(time.monotonic() + 120.0, grace_s=0.1)
    job = work(TRAPS).model_copy(update={"grace_s": 2.0, "checkpoint_signal": checkpoint_signal})
    rep = started(runner.start(job), runner)
    assert rep.status is not None
    try:
        poll_until(lambda: b"up" in rep.log_path.read_bytes(), runner)
        runner.stop(job.job_id, job.replica)
        poll_until(lambda: rep.state == "stopped", runner, timeout_s=60)
        lines = rep.log_path.read_text().split()
        assert "term" in lines, lines[-5:]
        if checkpoint_signal is None:
            assert "usr1" not in lines
        else:
            assert lines.index("usr1") < lines.index("term")
        # it trapped SIGTERM and ran on for its grace (the agent's own is 0.1 s), then was killed
        assert lines[lines.index("term") + 1 :].count("tick") >= 3
        assert "SIGKILL" in runner.reports()[0].reason
    finally:
        _kill(rep.pid)
        _kill(rep.status.supervisor_pid)


TOUCHES = [
    sys.executable,
    "-c",
    "import os, sys, time\n"
    "print('up', flush=True)\n"
    "sys.stdin.close(); time.sleep(0.5)\n"
    "open(os.environ['XPUPOOL_CHECKPOINT_FILE'], 'w').close()\n"
    "print('saved', flush=True); time.sleep(60)\n",
]


@pytest.mark.slow
def test_the_checkpoint_files_age_goes_with_the_replicas_report(tmp_path: Path) -> None:
    runner = Runner("n1", tmp_path, grace_s=0.1, settings=settings(tmp_path))
    runner.renew(time.monotonic() + 120.0, grace_s=0.1)
    rep = started(runner.start(work(TOUCHES)), runner)
    assert rep.status is not None
    try:
        poll_until(lambda: b"up" in rep.log_path.read_bytes(), runner)
        first = runner.reports()[0]
        if b"saved" not in rep.log_path.read_bytes():
            assert first.checkpoint_age_s is None  # nothing written yet
        poll_until(lambda: b"saved" in rep.log_path.read_bytes(), runner)
        age = runner.reports()[0].checkpoint_age_s
        assert age is not None and age >= 0
    finally:
        _kill(rep.pid)
        _kill(rep.status.supervisor_pid)
