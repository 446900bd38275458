"""Work no process can be started with (a NUL byte or a lone surrogate in argv or env: ``Popen``
raises ValueError) fails its replica with the reason, instead of leaving it 'running' with no
process, which nothing could stop (issue 18). The server refuses such jobs on submission; an
agent still gets them from an older server, or from a job stored before."""

from __future__ import annotations

from pathlib import Path

import pytest
from agent_work import settings, started, work

from xpupool.agent.runner import Runner


@pytest.mark.parametrize(
    ("command", "env", "said"),
    [
        (["echo", "a\x00b"], {}, "null byte"),
        (["echo"], {"K": "v\x00"}, "null byte"),
        (["echo", "\ud800"], {}, "surrogates"),
    ],
)
@pytest.mark.slow
def test_unstartable_work_fails_with_the_reason(
    tmp_path: Path, command: list[str], env: dict[str, str], said: str
) -> None:
    runner = Runner("n1", tmp_path, settings=settings(tmp_path))
    rep = started(runner.start(work(command, env=env)), runner)
    assert rep is not None
    report = runner.reports()[0]
    assert report.state == "failed" and report.pid is None
    assert said in report.reason
    runner.stop(7, 0)  # nothing to stop; it stays failed
    runner.poll()
    assert runner.reports()[0].state == "failed"
