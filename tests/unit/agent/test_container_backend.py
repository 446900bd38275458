"""The container back end with a fake runtime first on PATH (this machine has a docker client and
no engine): the ``run`` argv it builds, the env file, the job's output in its log through the
same capped pipe, and stopping and cleanup through the runtime."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest
from agent_work import device, poll_until, settings, started, work

from fake_runtime import install, path_with, recorded
from xpupool.agent.launch import LaunchError, build_spec
from xpupool.agent.launch.container import ContainerBackend, write_env_file
from xpupool.agent.runner import Runner


@pytest.fixture
def argv_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    log = install(tmp_path / "bin", "docker")
    monkeypatch.setenv("PATH", path_with(tmp_path / "bin"))
    monkeypatch.setenv("XPUPOOL_TOKEN", "agent-secret")  # must reach neither client nor job
    return log


def _option(argv: list[str], key: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == key]


def test_run_argv_carries_the_spec(tmp_path: Path) -> None:
    cfg = settings(tmp_path, runtime="docker", device_root=Path("/dev"))
    w = work(
        ["python", "train.py"],
        image="registry.example/train:1",
        devices=[device(3, vendor="huawei"), device(5, vendor="huawei")],
        cpu_milli=2500,
        memory_mib=4096,
        job_id=12,
        replica=1,
        allocation_id=40,
    )
    spec = build_spec(w, tmp_path / "logs" / "12-1-40.log", cfg)
    argv = ContainerBackend(cfg).argv(spec)
    assert argv[:5] == ["docker", "run", "--rm", "--init", "--name"]
    assert _option(argv, "--name") == [f"xpupool-{spec.slug}"]
    assert _option(argv, "--user") == [f"{os.geteuid()}:{os.getegid()}"]
    assert _option(argv, "--env-file") == [str(tmp_path / "logs" / f"{spec.slug}.env")]
    assert _option(argv, "--cpus") == ["2.5"] and _option(argv, "--memory") == ["4096m"]
    assert _option(argv, "--workdir") == [str(spec.workdir)]
    assert f"{spec.workdir}:{spec.workdir}" in _option(argv, "-v")
    assert _option(argv, "--device") == [
        "/dev/davinci3:/dev/davinci3",
        "/dev/davinci5:/dev/davinci5",
        "/dev/davinci_manager:/dev/davinci_manager",
        "/dev/devmm_svm:/dev/devmm_svm",
        "/dev/hisi_hdc:/dev/hisi_hdc",
    ]
    assert argv[-3:] == ["registry.example/train:1", "python", "train.py"]
    assert not any("=" in a and a.split("=")[0].isupper() for a in argv)  # no env in ps


def test_uid_of_the_tenant_when_the_agent_switches(tmp_path: Path) -> None:
    from xpupool.agent.launch.identity import UidRange

    cfg = settings(tmp_path, runtime="podman", uid_range=UidRange(200000, 299999))
    spec = build_spec(work([], image="busybox", tenant_index=4), tmp_path / "l.log", cfg)
    argv = ContainerBackend(cfg).argv(spec)
    assert argv[0] == "podman" and _option(argv, "--user") == ["200004:200004"]
    assert argv[-1] == "busybox"  # no command: the image's entry point


@pytest.mark.parametrize("runtime", ["docker", "podman"])
def test_nothing_of_the_job_is_read_as_a_runtime_option(tmp_path: Path, runtime: str) -> None:
    """Issue 43: the image and the command come after every option and '--', so that neither
    runtime's parser (cobra, both) can take ``--privileged`` or ``--volume=/:/host`` for its
    own; an image that is not a reference (a job stored before the server checked) is refused."""
    cfg = settings(tmp_path, runtime=runtime)
    hostile = ["--user=0:0", "--volume=/:/host", "--pid=host", "alpine", "id"]
    spec = build_spec(work(hostile, image="alpine:3"), tmp_path / "l.log", cfg)
    argv = ContainerBackend(cfg).argv(spec)
    cut = argv.index("--")
    assert argv[cut + 1 :] == ["alpine:3", *hostile]
    assert "--privileged" not in argv and "--pid=host" not in argv[:cut]
    spec = build_spec(work(hostile, image="--privileged"), tmp_path / "l.log", cfg)
    with pytest.raises(LaunchError, match="not an image reference"):
        ContainerBackend(cfg).argv(spec)


def test_no_runtime_no_image(tmp_path: Path) -> None:
    spec = build_spec(work([], image="busybox"), tmp_path / "l.log", settings(tmp_path))
    with pytest.raises(LaunchError, match="container runtime"):
        ContainerBackend(settings(tmp_path)).argv(spec)


def test_env_file_is_private_and_refuses_what_it_cannot_carry(tmp_path: Path) -> None:
    path = tmp_path / "e.env"
    write_env_file(path, {"A": "1", "B": "x=y z"})
    assert path.read_text() == "A=1\nB=x=y z\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    with pytest.raises(LaunchError, match="env C"):
        write_env_file(path, {"C": "two\nlines"})


@pytest.mark.slow
def test_image_job_runs_logs_and_cleans_up(tmp_path: Path, argv_log: Path) -> None:
    cfg = settings(tmp_path, runtime="docker")
    runner = Runner("n1", tmp_path / "agent", settings=cfg)
    code = (
        "import os; print('in container', os.environ.get('CUDA_VISIBLE_DEVICES'),"
        " os.environ.get('MY_VAR'), os.environ.get('XPUPOOL_TOKEN'), os.getcwd())"
    )
    rep = started(
        runner.start(
            work(
                [sys.executable, "-c", code],
                image="python:3.12",
                env={"MY_VAR": "hello"},
                devices=[device(6)],
            )
        ),
        runner,
    )
    assert rep is not None and runner.settings.backend_name(rep.work.image) == "container"
    assert rep.spec is not None
    env_file = rep.log_path.with_name(f"{rep.spec.slug}.env")
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    assert "PATH=" not in env_file.read_text()  # the image keeps its own PATH
    poll_until(lambda: runner.replicas[(7, 0)].state != "running", runner)
    out = rep.log_path.read_text()
    assert runner.replicas[(7, 0)].state == "succeeded", out
    assert f"in container 0 hello None {rep.spec.workdir}" in out
    runs = recorded(argv_log, "run")
    assert len(runs) == 1 and _option(runs[0], "--gpus") == ['"device=nvidia-6"']
    assert recorded(argv_log, "rm") == [["docker", "rm", "-f", f"xpupool-{rep.spec.slug}"]]
    assert not env_file.exists()
    assert not rep.spec.workdir.exists()  # removed once the container is gone
    assert rep.limits.startswith("limits: docker cgroup")


@pytest.mark.slow
def test_stop_goes_through_the_runtime(tmp_path: Path, argv_log: Path) -> None:
    runner = Runner(
        "n1", tmp_path / "agent", grace_s=5.0, settings=settings(tmp_path, runtime="docker")
    )
    code = "import time; print('up', flush=True); time.sleep(60)"
    rep = started(runner.start(work([sys.executable, "-c", code], image="python:3.12")), runner)
    assert rep is not None and rep.spec is not None
    poll_until(lambda: rep.log_path.read_bytes().startswith(b"up"), runner)
    runner.stop(7, 0)
    poll_until(lambda: runner.replicas[(7, 0)].state == "stopped", runner)
    name = f"xpupool-{rep.spec.slug}"
    assert ["docker", "kill", "--signal", "TERM", name] in recorded(argv_log, "kill")
    assert "SIGTERM" in runner.replicas[(7, 0)].reason
