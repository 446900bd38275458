"""``xpupool up`` asks the container runtime (``podman info``: about a second) on a thread of its
own while the server's modules import and its store opens, and the in-process agent is made with
what it found: no node of the agent exists, so none is offered image jobs, before its runtime is
known; a runtime asked for that does not answer still stops the start (cli_up.py)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import xpupool.probes.container_runtime as container_runtime
import xpupool.server.up as server_up
from xpupool.cli import main
from xpupool.probes.base import ProbeError, ProbeFailure
from xpupool.probes.container_runtime import ContainerRuntime, RuntimeDetection


def _run_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, found: RuntimeDetection, *args: str
) -> tuple[Any, list[str]]:
    """``xpupool up`` with the server replaced by one that asks for the launch settings only
    after the probe has started (so a probe run before the server would hang, not pass)."""
    asked, release = threading.Event(), threading.Event()
    order: list[str] = []

    def detect(_: object) -> RuntimeDetection:
        order.append("probe started")
        asked.set()
        assert release.wait(10), "the server never started while the runtime was being asked"
        return found

    def serve(cfg: server_up.UpConfig, _echo: object) -> None:
        assert asked.wait(10), "the runtime was not asked"
        order.append("server started")
        release.set()
        assert cfg.launch is not None
        order.append(f"runtime {cfg.launch().runtime}")

    monkeypatch.setattr(container_runtime, "detect_runtime", detect)
    monkeypatch.setattr(server_up, "serve", serve)
    done = CliRunner().invoke(main, ["up", "--data", str(tmp_path / "data"), *args])
    return done, order


def test_the_runtime_is_asked_while_the_server_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    found = RuntimeDetection(ContainerRuntime("podman", "5.0", False))
    done, order = _run_up(tmp_path, monkeypatch, found)
    assert done.exit_code == 0, done.output
    assert order == ["probe started", "server started", "runtime podman"]


def test_a_runtime_asked_for_that_does_not_answer_still_stops_the_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    absent = RuntimeDetection(
        None, (ProbeError("podman", "podman info", ProbeFailure.TOOL_MISSING, "not found"),)
    )
    done, order = _run_up(tmp_path, monkeypatch, absent)
    assert done.exit_code == 0, done.output  # auto: none, as before
    assert order[-1] == "runtime None"
    done, _ = _run_up(tmp_path, monkeypatch, absent, "--runtime", "podman")
    assert done.exit_code == 2 and "--runtime" in done.output, done.output


def test_the_collector_is_back_on_after_a_start_that_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``up`` turns the cyclic collector off while the server starts (cli_up.py); whatever the
    start's outcome, it is on again once the command returns."""
    import gc

    absent = RuntimeDetection(
        None, (ProbeError("podman", "podman info", ProbeFailure.TOOL_MISSING, "not found"),)
    )
    done, _ = _run_up(tmp_path, monkeypatch, absent, "--runtime", "podman")
    assert done.exit_code == 2
    assert gc.isenabled()
