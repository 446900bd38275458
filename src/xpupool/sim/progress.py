"""How far ``xpupool simulate`` has got, said in the form its output can carry.

A run is one (trace, policy, seed) replay and takes seconds to minutes; seventy of them make an
evening. On a terminal the display is a line updated in place: the run (trace, policy, seed k/n),
the tasks it has placed, and the runs done. Piped into a file or a CI log, a line rewritten with
carriage returns is noise, so each finished run prints one plain line with its outcome instead.
The runner reports to either through the three calls of :class:`RunProgress`; which one is used is
decided once, in :func:`progress_for`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, Self

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

TASK_STEP = 500
"""The replay reports tasks done every this many tasks (and at its end)."""


@dataclass(frozen=True, slots=True)
class RunLabel:
    """What a person reads for one run: ``default xpupool seed 43 (2/10)``."""

    trace: str
    policy: str
    seed: int
    seed_index: int  # 1-based place of the seed among its (trace, policy)'s seeds
    seeds: int

    def __str__(self) -> str:
        short = self.trace.removeprefix("openb_pod_list_")
        return f"{short} {self.policy} seed {self.seed} ({self.seed_index}/{self.seeds})"


def run_labels(runs: Sequence[tuple[str, str, int]]) -> list[RunLabel]:
    """Labels for (trace, policy, seed) runs, in their order."""
    counts: dict[tuple[str, str], int] = {}
    for trace, policy, _ in runs:
        counts[trace, policy] = counts.get((trace, policy), 0) + 1
    seen: dict[tuple[str, str], int] = {}
    labels = []
    for trace, policy, seed in runs:
        seen[trace, policy] = seen.get((trace, policy), 0) + 1
        labels.append(RunLabel(trace, policy, seed, seen[trace, policy], counts[trace, policy]))
    return labels


def outcome(run: Mapping[str, object]) -> str:
    """The figures a finished run is known by: FGD-protocol runs by unallocated GPU at arrived
    = 100 %, timed runs by utilisation and wait."""
    parts = []
    if "unallocated_pct_at_100" in run:
        parts.append(f"{run['tasks']} tasks, {run['failed']} failed")
        parts.append(f"unallocated {run['unallocated_pct_at_100']:.2f} % at 100 %")
    if "mean_util_pct" in run:
        parts.append(f"util {run['mean_util_pct']:.1f} %, mean wait {run['mean_wait_s']:.1f} s")
    if "seconds" in run:
        parts.append(f"{run['seconds']:.1f} s")
    return ", ".join(parts)


class RunProgress(Protocol):
    """What the runner tells: a run started, how many of its tasks are placed, it finished.
    Used as a context manager around the runs (a live display starts and ends with it)."""

    def started(self, index: int) -> None: ...

    def tasks(self, index: int, done: int, total: int) -> None: ...

    def finished(self, index: int, run: Mapping[str, object]) -> None: ...

    def __enter__(self) -> RunProgress: ...

    def __exit__(self, *exc: object) -> None: ...


class ProgressContext:
    """``with``: ``open`` on entry, ``close`` on exit (both nothing unless overridden)."""

    def open(self) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self) -> Self:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class PlainProgress(ProgressContext):
    """One line per finished run, nothing rewritten: for pipes, files and CI logs."""

    def __init__(self, console: Console, labels: Sequence[RunLabel]) -> None:
        self.console = console
        self.labels = labels
        self.done = 0

    def started(self, index: int) -> None:
        pass

    def tasks(self, index: int, done: int, total: int) -> None:
        pass

    def finished(self, index: int, run: Mapping[str, object]) -> None:
        self.done += 1
        line = f"run {self.done}/{len(self.labels)}: {self.labels[index]}: {outcome(run)}"
        self.console.print(line, markup=False, highlight=False, soft_wrap=True)


class LiveProgress(ProgressContext):
    """Lines updated in place: every run done so far, and the run under way with its tasks
    (runs in other processes report only when they finish). Gone when the runs are."""

    def __init__(self, console: Console, labels: Sequence[RunLabel]) -> None:
        self.labels = labels
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(bar_width=20),
            TextColumn("{task.fields[count]}"),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        )
        self.all_runs = self.progress.add_task(
            "simulate", total=len(labels), count=f"0/{len(labels)} runs"
        )
        self.current: TaskID | None = None

    def started(self, index: int) -> None:
        if self.current is not None:
            self.progress.remove_task(self.current)
        self.current = self.progress.add_task(str(self.labels[index]), total=None, count="")

    def tasks(self, index: int, done: int, total: int) -> None:
        if self.current is not None:
            count = f"{done:,}/{total:,} tasks"
            self.progress.update(self.current, completed=done, total=total, count=count)

    def finished(self, index: int, run: Mapping[str, object]) -> None:
        self.progress.advance(self.all_runs)
        done = int(self.progress.tasks[0].completed)
        self.progress.update(self.all_runs, count=f"{done}/{len(self.labels)} runs")

    def open(self) -> None:
        self.progress.start()

    def close(self) -> None:
        self.progress.stop()


def progress_for(
    console: Console, labels: Sequence[RunLabel], is_tty: bool | None = None
) -> RunProgress:
    """Live lines when ``console`` writes to a terminal (or ``is_tty`` says so), else plain
    lines, one per finished run."""
    tty = console.is_terminal if is_tty is None else is_tty
    return LiveProgress(console, labels) if tty else PlainProgress(console, labels)
