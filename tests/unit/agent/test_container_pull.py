"""The pull step as a unit (agent/launch/container_pull.py): the engine's stderr classified, the
policies, the timeout, against a stand-in engine script. The real engine and a real registry:
tests/integration/test_container_pulls.py."""

from __future__ import annotations

import stat
import time
from pathlib import Path

import pytest

from xpupool.agent.launch.container_pull import classify, ensure_image
from xpupool.agent.launch.spec import LaunchError

# what podman 4.3 printed for each, against Debian's docker-registry and closed ports
PODMAN = {
    "image not found": "Error: initializing source docker://127.0.0.1:41235/x/busybox:no:"
    " reading manifest no in 127.0.0.1:41235/x/busybox: manifest unknown: manifest unknown",
    "registry unreachable": "Error: initializing source docker://localhost/x:nope: pinging"
    ' container registry localhost: Get "https://localhost/v2/": dial tcp 127.0.0.1:443:'
    " connect: connection refused",
    "unauthorised": "Error: initializing source docker://reg.example/x:1: reading manifest 1"
    " in reg.example/x: unauthorized: authentication required",
    "failed": "Error: short-name resolution enforced but cannot prompt without a TTY",
}


@pytest.mark.parametrize("failure", sorted(PODMAN))
def test_the_engines_stderr_is_classified(failure: str) -> None:
    assert classify(PODMAN[failure]) == failure


def _engine(tmp_path: Path, script: str) -> list[str]:
    """A stand-in engine: ``image inspect`` exits 1 unless a file ``present`` exists; ``pull``
    runs ``script``; each call is appended to ``calls``."""
    path = tmp_path / "engine"
    path.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> {tmp_path}/calls\n'
        f'if [ "$1" = image ]; then [ -e {tmp_path}/present ]; exit $?; fi\n'
        f"{script}\n"
    )
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return [str(path)]


def test_if_not_present_pulls_once_and_shows_the_progress(tmp_path: Path) -> None:
    base = _engine(tmp_path, f"echo 'Copying blob sha256:aa done'; touch {tmp_path}/present")
    lines: list[str] = []
    done = ensure_image(base, "reg/x:1", "if-not-present", 10, lines.append)
    assert done.startswith("pulled reg/x:1 in ") and done.endswith(", 1 layers"), done
    assert lines[0] == "pulling reg/x:1 (timeout 10 s)" and "Copying blob" in lines[1], lines
    assert ensure_image(base, "reg/x:1", "if-not-present", 10, lines.append) == "image present"
    assert ensure_image(base, "reg/x:1", "always", 10, lines.append).startswith("pulled")
    assert (tmp_path / "calls").read_text().count("pull reg/x:1") == 2


def test_never_refuses_a_missing_image_without_pulling(tmp_path: Path) -> None:
    base = _engine(tmp_path, "exit 0")
    with pytest.raises(LaunchError, match="ErrImageNeverPull: image not present: reg/x:1"):
        ensure_image(base, "reg/x:1", "never", 10, lambda _: None)
    assert "pull" not in (tmp_path / "calls").read_text()


def test_a_failed_pull_is_the_reason_with_the_engines_last_line(tmp_path: Path) -> None:
    base = _engine(tmp_path, f"echo '{PODMAN['image not found']}' >&2; exit 125")
    with pytest.raises(LaunchError) as err:
        ensure_image(base, "reg/x:1", "always", 10, lambda _: None)
    assert err.value.reason.startswith("ErrImagePull: image not found: reg/x:1 (Error:")


def test_a_pull_past_the_timeout_is_killed(tmp_path: Path) -> None:
    base = _engine(tmp_path, "exec sleep 30")
    start = time.monotonic()
    with pytest.raises(LaunchError, match=r"ErrImagePull: timed out: reg/x:1 \(no image after 1 s"):
        ensure_image(base, "reg/x:1", "always", 1, lambda _: None)
    assert time.monotonic() - start < 10


def test_an_unknown_policy_is_refused(tmp_path: Path) -> None:
    with pytest.raises(LaunchError, match="pull policy 'sometimes'"):
        ensure_image(_engine(tmp_path, "exit 0"), "reg/x:1", "sometimes", 10, lambda _: None)
