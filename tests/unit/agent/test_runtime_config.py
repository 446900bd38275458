"""The container runtime's configuration for a host (agent/launch/runtime_config.py): what is
detected from which facts, the operator's containers.conf replacing it, and every call carrying
it (the ``run`` argv, and ``kill``/``rm``/``ps`` through the same options)."""

from __future__ import annotations

from pathlib import Path

import pytest
from agent_work import settings, work

from xpupool.agent.launch import build_spec
from xpupool.agent.launch.container import ContainerBackend
from xpupool.agent.launch.runtime_config import (
    HostFacts,
    RuntimeConfig,
    cgroup_layout,
    detect_runtime_config,
    plan_runtime_config,
)
from xpupool.agent.launch.spec_file import SpecFile, dumps, loads
from xpupool.probes.container_runtime import ContainerRuntime

# /proc/self/mounts of the test machines (hybrid), of a cgroup v2 host, and of a v1-only one
HYBRID = """\
tmpfs /sys/fs/cgroup tmpfs rw,relatime,mode=755 0 0
cgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0
cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0
cgroup /sys/fs/cgroup/pids cgroup rw,relatime,pids 0 0
cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0
"""
V2 = "cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nodev,noexec,relatime,nsdelegate 0 0\n"
V1 = "\n".join(HYBRID.splitlines()[:4]) + "\n"
PODMAN = ContainerRuntime("podman", "4.3.1", True, oci_runtime="crun", cgroup_manager="cgroupfs")
TEST_MACHINE = HostFacts("hybrid", False, True, 20000, 96364, 32768)
SERVER = HostFacts("v2", True, True, 1048576, None, 4194304)


def test_cgroup_layout_from_mounts() -> None:
    assert cgroup_layout(HYBRID) == "hybrid"
    assert cgroup_layout(V2) == "v2"
    assert cgroup_layout(V1) == "v1"
    assert cgroup_layout("proc /proc proc rw 0 0\n") == "none"


def test_the_test_machines_podman_gets_runc_cgroupfs_and_ulimits_it_can_set() -> None:
    """What podman 4.3 needed there: crun refuses the hybrid layout, there is no systemd, and
    the hard limits (nofile 20000; nproc 96364, but podman runs under pid_max 32768) are below
    podman's 1048576 ("OCI permission denied" from setrlimit)."""
    config = plan_runtime_config(PODMAN, TEST_MACHINE, pids_limit=500)
    assert config.global_args == ("--runtime", "runc", "--cgroup-manager", "cgroupfs")
    assert config.run_args == ("--ulimit", "nofile=20000:20000", "--ulimit", "nproc=32768:32768")
    assert config.pids_limit == 500
    assert "runc (not crun: hybrid cgroups)" in config.describe()


def test_a_systemd_host_on_cgroup_v2_keeps_the_engines_choices() -> None:
    config = plan_runtime_config(PODMAN, SERVER)
    assert config.global_args == ()
    assert config.run_args == (
        "--ulimit",
        "nofile=1048576:1048576",
        "--ulimit",
        "nproc=1048576:1048576",
    )


def test_no_runc_says_so_and_adds_nothing() -> None:
    facts = HostFacts("hybrid", True, False, None, None, None)
    config = plan_runtime_config(PODMAN, facts)
    assert "--runtime" not in config.global_args
    assert "no runc" in config.describe()


def test_docker_and_an_operators_file_get_nothing_detected() -> None:
    docker = ContainerRuntime("docker", "27.3.1", False, "runc", "systemd")
    assert plan_runtime_config(docker, TEST_MACHINE).global_args == ()
    assert plan_runtime_config(docker, TEST_MACHINE).run_args == ()
    config = plan_runtime_config(PODMAN, TEST_MACHINE, override="/etc/xpupool/podman.conf")
    assert config.global_args == () and config.run_args == ()
    assert config.describe() == "CONTAINERS_CONF=/etc/xpupool/podman.conf"


def test_containers_conf_in_the_environment_is_the_override(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CONTAINERS_CONF", "/srv/podman.conf")
    assert detect_runtime_config(PODMAN, 100).override == "/srv/podman.conf"
    monkeypatch.delenv("CONTAINERS_CONF")
    assert detect_runtime_config(PODMAN, 100).override == ""


def test_a_declared_runtime_other_than_the_detected_one_gets_no_engine_options() -> None:
    config = plan_runtime_config(PODMAN, TEST_MACHINE, pids_limit=7)
    assert config.for_runtime("podman") is config
    assert config.for_runtime("docker") == RuntimeConfig(runtime="docker", pids_limit=7)


def test_run_argv_carries_the_configuration_and_it_survives_the_spec_file(tmp_path: Path) -> None:
    config = plan_runtime_config(PODMAN, TEST_MACHINE, pids_limit=0)
    cfg = settings(tmp_path, runtime="podman", runtime_config=config)
    log = tmp_path / "agent" / "replicas" / "7.0.1" / "output.log"
    spec = build_spec(work(["true"], image="busybox"), log, cfg)
    argv = ContainerBackend(cfg).argv(spec)
    run = argv.index("run")
    assert argv[:run] == ["podman", "--runtime", "runc", "--cgroup-manager", "cgroupfs"]
    assert argv[run + 1 : run + 3] == ["--rm", "--init"]
    assert "nofile=20000:20000" in argv and "nproc=32768:32768" in argv
    assert argv[argv.index("--pids-limit") + 1] == "-1"  # 0: no limit
    assert f"xpupool.owner={tmp_path / 'agent'}" in argv
    back = loads(dumps(SpecFile("container", cfg, spec, 5.0)))
    assert back.settings.runtime_config == config
    assert ContainerBackend(back.settings).argv(back.spec) == argv
