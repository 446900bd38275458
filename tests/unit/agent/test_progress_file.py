"""A job's progress file, read by its agent at each report (issue 55): a real process writes
``$XPUPOOL_PROGRESS_FILE``; the replica's report carries a new, valid rate once, and nothing for
junk, an unchanged file, or a link pointing elsewhere."""

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
from xpupool.model.progress import MAX_RATE, parse_progress

# writes the next of its rates into its progress file at each SIGUSR1 from the test
WRITES = [
    sys.executable,
    "-c",
    "import os, pathlib, signal, time\n"
    "path = pathlib.Path(os.environ['XPUPOOL_PROGRESS_FILE'])\n"
    "rates = iter(['182.5 steps/s', 'junk', '1e400', '95'])\n"
    "def write(*_):\n"
    "    text = next(rates)\n"
    "    path.write_text(text)\n"
    "    print('wrote', text, flush=True)\n"
    "signal.signal(signal.SIGUSR1, write)\n"
    "print('up', flush=True)\n"
    "while True: time.sleep(0.1)\n",
]


def test_a_progress_file_holds_one_bounded_rate() -> None:
    assert parse_progress("182.5 steps/s\n") == 182.5
    assert parse_progress(" 7 ") == 7.0
    for bad in ("", "junk", "nan", "inf", "-3", "0", "1e400", f"{MAX_RATE * 10}"):
        assert parse_progress(bad) is None, bad


@pytest.mark.slow
def test_the_rate_a_job_writes_goes_with_its_replicas_report_once(tmp_path: Path) -> None:
    runner = Runner("n1", tmp_path, grace_s=0.1, settings=settings(tmp_path))
    runner.renew(time.monotonic() + 120.0, grace_s=0.1)
    rep = started(runner.start(work(WRITES)), runner)
    assert rep.status is not None and rep.pid is not None and rep.spec is not None
    pid = rep.pid

    def write_next(n: int) -> None:
        os.kill(pid, signal.SIGUSR1)
        poll_until(lambda: rep.log_path.read_bytes().count(b"wrote") >= n, runner, 60)
        time.sleep(0.02)  # a later mtime than the previous write's, on coarse clocks too

    try:
        poll_until(lambda: b"up" in rep.log_path.read_bytes(), runner, 60)
        assert runner.reports()[0].progress_rate is None  # nothing written yet
        write_next(1)
        assert runner.reports()[0].progress_rate == 182.5
        assert runner.reports()[0].progress_rate is None  # the same figure is sent once
        write_next(2)  # junk
        assert runner.reports()[0].progress_rate is None
        write_next(3)  # out of range
        assert runner.reports()[0].progress_rate is None
        write_next(4)
        assert runner.reports()[0].progress_rate == 95.0
        # a job that makes its file a link to another file is not read through it
        secret = tmp_path / "elsewhere"
        secret.write_text("42")
        progress = rep.spec.workdir / ".xpupool-progress"
        progress.unlink()
        progress.symlink_to(secret)
        assert runner.reports()[0].progress_rate is None
    finally:
        for target in (rep.pid, rep.status.supervisor_pid):
            if target:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(target, signal.SIGKILL)
