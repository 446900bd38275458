"""``simulate``'s progress: which form is chosen, what each prints, and what the runner tells it.

The terminal form is checked by asking for it (``is_tty=True``) on a console that records what a
terminal would receive, rather than through a pseudo-terminal.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from pathlib import Path

import pytest
from rich.console import Console

from xpupool.sim.progress import (
    LiveProgress,
    PlainProgress,
    ProgressContext,
    progress_for,
    run_labels,
)
from xpupool.sim.runner import RunSpec, run_all

from factories import tiny_trace

LABELS = run_labels(
    [("openb_pod_list_default", "xpupool", 42), ("openb_pod_list_default", "xpupool", 43)]
)
RUN = {"tasks": 10812, "failed": 7, "unallocated_pct_at_100": 4.0612, "seconds": 1.27}


def _console(terminal: bool) -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, force_terminal=terminal, width=100, color_system=None), out


def test_a_terminal_gets_a_line_updated_in_place_with_the_seed_and_tasks() -> None:
    console, out = _console(terminal=True)
    progress = progress_for(console, LABELS, is_tty=True)
    assert isinstance(progress, LiveProgress)
    with progress:
        progress.started(1)
        progress.tasks(1, 5000, 10812)
        progress.progress.refresh()
        shown = out.getvalue()
    assert "default xpupool seed 43 (2/2)" in shown and "5,000/10,812 tasks" in shown
    assert "0/2 runs" in shown
    assert "\r" in shown or "\x1b[" in shown  # rewritten in place, not appended


def test_a_pipe_gets_one_plain_line_per_finished_run() -> None:
    console, out = _console(terminal=False)
    progress = progress_for(console, LABELS, is_tty=False)
    assert isinstance(progress, PlainProgress)
    with progress:
        progress.started(0)
        progress.tasks(0, 500, 10812)
        progress.finished(0, RUN)
    assert out.getvalue() == (
        "run 1/2: default xpupool seed 42 (1/2): 10812 tasks, 7 failed, "
        "unallocated 4.06 % at 100 %, 1.3 s\n"
    )


class _Recorder(ProgressContext):
    def __init__(self) -> None:
        self.heard: list[tuple[str, int, int]] = []

    def started(self, index: int) -> None:
        self.heard.append(("started", index, 0))

    def tasks(self, index: int, done: int, total: int) -> None:
        self.heard.append(("tasks", index, done))

    def finished(self, index: int, run: Mapping[str, object]) -> None:
        self.heard.append(("finished", index, int(str(run["tasks"]))))


@pytest.mark.slow
def test_a_serial_run_reports_its_start_its_tasks_and_its_end(tmp_path: Path) -> None:
    nodes, pods = tiny_trace(tmp_path, nodes=100, gpus=8, pods=40, shares=(250, 500))
    recorder = _Recorder()
    (run,) = run_all([RunSpec(nodes, pods, "bestfit", 1)], jobs=1, progress=recorder)
    tasks = int(str(run["tasks"]))
    assert tasks > 1000  # several reports of TASK_STEP tasks
    assert recorder.heard[0] == ("started", 0, 0)
    assert recorder.heard[-1] == ("finished", 0, tasks)
    reported = [done for what, _, done in recorder.heard if what == "tasks"]
    assert reported[-1] == tasks and reported == sorted(reported) and len(reported) >= 2
