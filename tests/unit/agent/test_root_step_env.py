"""The processes that run as root before a replica's uid switch start with an environment the
agent builds, never the job's (issue 43, item 1): the loader and libc read ``LD_PRELOAD``,
``GCONV_PATH``, ``LOCPATH``, ``MALLOC_*`` and ``HOSTALIASES`` from whatever environment a process
starts with. The end-to-end exploit (a real preload library under ``xpupool up`` and a standalone
agent) is tests/integration/test_job_env_never_root.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from agent_work import settings, work

from xpupool.agent.launch import build_spec, start_process
from xpupool.agent.launch import process as launch_process
from xpupool.agent.launch.spec import LaunchError

LOADER_AND_LIBC = {
    "LD_PRELOAD": "/tmp/evil.so",
    "LD_LIBRARY_PATH": "/tmp/evil",
    "GCONV_PATH": "/tmp/evil",
    "LOCPATH": "/tmp/evil",
    "MALLOC_CHECK_": "3",
    "HOSTALIASES": "/tmp/evil/hosts",
}
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the launcher")


@linux_only
@pytest.mark.slow
def test_the_launcher_starts_with_the_agents_environment_and_the_job_gets_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: dict[str, Any] = {}
    real = subprocess.Popen

    def spy(argv: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        seen["env"] = dict(kwargs["env"])
        return real(argv, **kwargs)

    monkeypatch.setattr(launch_process.subprocess, "Popen", spy)
    log = tmp_path / "log"
    spec = build_spec(work(["sh", "-c", "env"], env=LOADER_AND_LIBC), log, settings(tmp_path))
    launched = start_process(spec, list(spec.argv))
    launched.proc.wait(20)
    assert launched.pump is not None
    launched.pump.join(5)
    assert seen["env"] == launch_process.LAUNCHER_ENV
    printed = log.read_text()
    for name, value in LOADER_AND_LIBC.items():  # the job's own process still has them
        assert f"{name}={value}" in printed


@linux_only
@pytest.mark.slow
def test_the_launcher_refuses_an_environment_it_did_not_get_from_the_agent() -> None:
    read, write = os.pipe()
    os.close(write)
    argv = launch_process.launch_argv(["true"], env_fd=read)
    done = subprocess.run(
        argv, env={"LANG": "C.UTF-8", "LD_PRELOAD": ""}, pass_fds=(read,), capture_output=True
    )
    os.close(read)
    assert done.returncode == 126
    assert b"not the agent's" in done.stderr


def test_a_variable_no_process_can_be_given_is_refused_naming_it() -> None:
    with pytest.raises(LaunchError, match="'A=B'"):
        os.close(launch_process.environment_file({"A=B": "x"}))
    with pytest.raises(LaunchError, match="null byte"):
        os.close(launch_process.environment_file({"K": "a\0b"}))
