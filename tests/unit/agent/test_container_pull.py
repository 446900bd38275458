"""The pull step as a unit (agent/launch/container_pull.py): the engine's stderr classified, the
policies, the timeout, against a stand-in engine script. The real engine and a real registry:
tests/integration/test_container_pulls.py."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest

from xpupool.agent.launch.container_pull import classify, ensure_image
from xpupool.agent.launch.spec import LaunchError, LaunchStoppedError

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


def test_a_stop_gives_a_pull_up_at_once(tmp_path: Path) -> None:
    base = _engine(tmp_path, "exec sleep 30")
    lines: list[str] = []
    asked_at = time.monotonic() + 0.5
    with pytest.raises(LaunchStoppedError, match=r"stopped while its image reg/x:1 was pulled"):
        ensure_image(
            base,
            "reg/x:1",
            "always",
            600,
            lines.append,
            stop_asked=lambda: time.monotonic() > asked_at,
        )
    assert lines[-1] == "pull of reg/x:1 given up: the replica was stopped", lines


def test_a_job_cancelled_while_its_image_is_pulled_stops_without_waiting_for_the_pull(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 45: a stop asked for during the pull step waited for the pull's end (up to the
    agent's pull timeout) before the replica was reported stopped; the cancel of a job whose
    image is large or whose registry hangs sat for minutes. Through a real supervisor process,
    with an engine on PATH whose pull never ends."""
    from agent_work import poll_until, settings, work

    from xpupool.agent.runner import Runner

    engine = tmp_path / "bin" / "podman"
    engine.parent.mkdir()
    engine.write_text(
        '#!/bin/sh\ncase "$1" in image) exit 1;; pull) exec sleep 300;; *) exit 0;; esac\n'
    )
    engine.chmod(0o755)
    monkeypatch.setenv("PATH", f"{engine.parent}:{os.environ['PATH']}")
    cfg = settings(tmp_path, runtime="podman", pull_timeout_s=600.0)
    runner = Runner("n1", tmp_path / "agent", settings=cfg)
    rep = runner.start(work(["true"], image="reg/x:1"))
    assert rep is not None
    poll_until(lambda: rep.log_path.exists() and b"pulling" in rep.log_path.read_bytes(), runner)
    runner.stop(rep.work.job_id, rep.work.replica)
    poll_until(lambda: rep.state == "stopped", runner, timeout_s=30)
    report = runner.reports()[0]
    assert "stopped while its image reg/x:1 was pulled" in report.reason, report


def test_a_replica_being_pulled_is_reported_with_the_pulls_progress(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 45 part 3: the pull's progress reached the job's events only once the pull ended
    (the limits line); a replica still starting was not reported at all. Its supervisor now
    writes the step it is at, and the runner reports it (``StartingReport``) every heartbeat
    while the replica is starting; never as a replica report, which the server takes as the
    start. Through a real supervisor process, with an engine on PATH whose pull copies two
    layers and then hangs."""
    from agent_work import poll_until, settings, work

    from xpupool.agent.runner import Runner

    engine = tmp_path / "bin" / "podman"
    engine.parent.mkdir()
    engine.write_text(
        '#!/bin/sh\ncase "$1" in image) exit 1;;\n'
        "pull) echo 'Copying blob sha256:aa'; echo 'Copying blob sha256:bb'; exec sleep 300;;\n"
        "*) exit 0;; esac\n"
    )
    engine.chmod(0o755)
    monkeypatch.setenv("PATH", f"{engine.parent}:{os.environ['PATH']}")
    cfg = settings(tmp_path, runtime="podman", pull_timeout_s=600.0)
    runner = Runner("n1", tmp_path / "agent", settings=cfg)
    rep = runner.start(work(["true"], image="reg/x:1"))
    assert rep is not None
    poll_until(lambda: bool(runner.starting_reports()), runner)
    first = runner.starting_reports()
    assert [(s.job_id, s.replica, s.attempt) for s in first] == [
        (rep.work.job_id, rep.work.replica, rep.work.attempt)
    ]
    assert first[0].step.startswith("pulling reg/x:1"), first
    # the layers copied follow within the supervisor's step period
    poll_until(
        lambda: runner.starting_reports()[0].step == "pulling reg/x:1: 2 layers copied",
        runner,
        timeout_s=15,
    )
    assert runner.reports() == []  # still starting: no replica report
    runner.stop(rep.work.job_id, rep.work.replica)
    poll_until(lambda: rep.state == "stopped", runner, timeout_s=30)
    assert runner.starting_reports() == []
