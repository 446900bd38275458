"""The container back end's ``run`` argv and env file, as units. What the container then does
(uid, environment, working directory, limits, output, stop, restarts, leftovers) is tested on a
real podman: tests/integration/test_container_engine.py and test_container_lifecycle.py."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from agent_work import device, settings, work

from xpupool.agent.launch import LaunchError, build_spec
from xpupool.agent.launch.container import ContainerBackend, write_env_file


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
    assert argv[:6] == ["docker", "run", "--rm", "--init", "--pull=never", "--name"]
    assert _option(argv, "--name") == [f"xpupool-{spec.slug}"]
    assert _option(argv, "--user") == [f"{os.geteuid()}:{os.getegid()}"]
    assert _option(argv, "--env-file") == [str(tmp_path / "logs" / f"{spec.slug}.env")]
    assert _option(argv, "--cpus") == ["2.5"] and _option(argv, "--memory") == ["4096m"]
    assert _option(argv, "--shm-size") == ["4096m"]  # two cards: room for NCCL's shared memory
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
    assert _option(argv, "--shm-size") == []  # one card or none: the engine's default
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


def test_leftovers_are_found_by_owner_and_only_those_no_run_keeps_are_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``ps`` filtered by this runner's owner label; ``rm -f`` for each container it lists
    except the kept ones and any not named as the agent names its own."""
    import subprocess

    backend = ContainerBackend(settings(tmp_path, runtime="podman"))
    calls: list[tuple[str, ...]] = []

    def call(*args: str) -> subprocess.CompletedProcess[str]:
        calls.append(args)
        out = (
            "xpupool-box-1-0-1-aa\nxpupool-box-2-0-2-bb\nsomeone-elses\n" if args[0] == "ps" else ""
        )
        return subprocess.CompletedProcess(["podman", *args], 0, out, "")

    monkeypatch.setattr(backend, "_call", call)
    removed = backend.remove_leftovers(tmp_path / "agent" / "box", {"xpupool-box-2-0-2-bb"})
    assert removed == ["xpupool-box-1-0-1-aa"]
    owner = f"label=xpupool.owner={tmp_path / 'agent' / 'box'}"
    assert calls == [
        ("ps", "-a", "--filter", owner, "--format", "{{.Names}}"),
        ("rm", "-f", "xpupool-box-1-0-1-aa"),
    ]


def test_a_queues_network_is_taken_where_the_node_allows_it(tmp_path: Path) -> None:
    allowed = settings(tmp_path, runtime="podman", allowed_networks=("bridge", "host"))
    w = work(["sh"], image="busybox")
    w.network = "host"
    spec = build_spec(w, tmp_path / "l.log", allowed)
    assert spec.network == "host"
    argv = ContainerBackend(allowed).argv(spec)
    assert _option(argv, "--network") == ["host"] and "-p" not in argv
    from xpupool.agent.launch import spec_file

    data = spec_file.dumps(spec_file.SpecFile("container", allowed, spec, 1.0))
    back = spec_file.loads(data)
    assert back.spec.network == "host" and back.settings.allowed_networks == ("bridge", "host")
    only_bridge = settings(tmp_path, runtime="podman")
    with pytest.raises(
        LaunchError, match="asks for the host network; this node allows only bridge"
    ):
        build_spec(w, tmp_path / "l.log", only_bridge)
    w.network = None  # the node's own
    assert build_spec(w, tmp_path / "l.log", only_bridge).network == ""
