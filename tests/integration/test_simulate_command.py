"""``xpupool simulate`` as a user runs it: a real subprocess, from a folder other than the
repository's root, its output piped (not a terminal).

The default trace is the Alibaba one beside the repository (``../shared/traces``); these tests replay
it at a tiny ``--tune`` so that a run takes a fraction of a second.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from xpupool.sim.trace_files import (
    DEFAULT_NODES,
    DEFAULT_PODS,
    TRACE_FOLDER,
    TRACES_ENV,
    trace_folders,
)

from factories import tiny_trace


def _simulate(
    cwd: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k != TRACES_ENV}
    environ.update(env or {})
    return subprocess.run(
        [sys.executable, "-c", "from xpupool.cli import main; main()", "simulate", *args],
        cwd=cwd,
        env=environ,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.skipif(
    not any((f / DEFAULT_NODES).is_file() for f in trace_folders({}, Path("/"))),
    reason="the Alibaba trace is not beside this checkout (../shared/traces)",
)
def test_the_default_trace_is_found_from_any_folder(tmp_path: Path) -> None:
    """From a folder unrelated to the checkout, the trace beside the checkout is found."""
    done = _simulate(tmp_path, "--policy", "bestfit", "--seeds", "42", "--tune", "0.002", "--json")
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    assert payload["trace"] == "openb_pod_list_default" and payload["runs"][0]["tasks"] > 0


def test_the_default_trace_is_found_beside_the_working_folder(tmp_path: Path) -> None:
    """A checkout elsewhere (an installed package) still finds shared/traces beside the folder it
    is run from; the files stand in for the trace under its real names."""
    folder = tmp_path / TRACE_FOLDER
    folder.mkdir(parents=True)
    nodes, pods = tiny_trace(tmp_path)
    Path(nodes).rename(folder / DEFAULT_NODES)
    Path(pods).rename(folder / DEFAULT_PODS)
    work = tmp_path / "work"
    work.mkdir()
    assert folder in trace_folders({}, work)
    done = _simulate(work, "--policy", "bestfit", "--seeds", "42", "--json")
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    assert payload["trace"] == "openb_pod_list_default" and payload["runs"][0]["tasks"] > 0


def test_a_missing_trace_is_one_line_saying_where_it_looked(tmp_path: Path) -> None:
    empty = tmp_path / "no-traces-here"
    empty.mkdir()
    done = _simulate(tmp_path, "--policy", "bestfit", env={TRACES_ENV: str(empty)})
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert str(empty) in lines[0] and "--nodes" in lines[0] and "--pods" in lines[0]
    assert "Traceback" not in done.stderr


def test_piped_progress_is_one_plain_line_per_finished_run(tmp_path: Path) -> None:
    nodes, pods = tiny_trace(tmp_path)
    args = ("--nodes", nodes, "--pods", pods, "--policy", "bestfit,fgd", "--seeds", "1-2")
    done = _simulate(tmp_path, *args)
    assert done.returncode == 0, done.stderr
    assert "\r" not in done.stdout + done.stderr  # nothing rewritten in place
    runs = [line for line in done.stdout.splitlines() if line.startswith("run ")]
    assert [line.split(":")[:2] for line in runs] == [
        ["run 1/4", " pods bestfit seed 1 (1/2)"],
        ["run 2/4", " pods bestfit seed 2 (2/2)"],
        ["run 3/4", " pods fgd seed 1 (1/2)"],
        ["run 4/4", " pods fgd seed 2 (2/2)"],
    ]
    assert all("tasks" in line and "unallocated" in line for line in runs)
    timed = _simulate(tmp_path, *args, "--mode", "timed", "--json")
    assert timed.returncode == 0, timed.stderr
    assert len([line for line in timed.stderr.splitlines() if line.startswith("run ")]) == 4
    assert json.loads(timed.stdout)["mode"] == "timed"  # progress stays off the JSON
