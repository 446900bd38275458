"""Finding a container runtime by asking it: the parsers on recorded ``info`` output, and the ask
itself against runtimes on PATH (the fake that answers like an engine, and a client with no engine
behind it, which is what this machine has)."""

from __future__ import annotations

import stat
import sys
from pathlib import Path

import pytest

from fake_runtime import install
from xpupool.probes.base import ProbeError, ProbeFailure
from xpupool.probes.container_runtime import (
    ContainerRuntime,
    ask_runtime,
    detect_runtime,
    parse_docker_info,
    parse_podman_info,
)

FIXTURES = Path(__file__).parents[2] / "fixtures" / "probes" / "container_runtime"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_docker_client_alone_is_no_runtime() -> None:
    assert parse_docker_info(fixture("docker-28.2.2-no-engine.json")) is None


def test_docker_engine_with_and_without_cdi() -> None:
    assert parse_docker_info(fixture("docker-27.3.1-cdi.json")) == ContainerRuntime(
        "docker", "27.3.1", cdi=True, oci_runtime="runc", cgroup_manager="systemd"
    )
    assert parse_docker_info(fixture("docker-27.3.1-no-cdi.json")) == ContainerRuntime(
        "docker", "27.3.1", cdi=False, oci_runtime="runc", cgroup_manager="systemd"
    )
    assert parse_docker_info(fixture("docker-24.0.7.json")) == ContainerRuntime(
        "docker", "24.0.7", cdi=False, oci_runtime="runc", cgroup_manager="systemd"
    )


def test_podman_reads_cdi_from_4_1() -> None:
    assert parse_podman_info(fixture("podman-5.2.1.json")) == ContainerRuntime(
        "podman", "5.2.1", cdi=True
    )
    assert parse_podman_info(fixture("podman-3.4.4.json")) == ContainerRuntime(
        "podman", "3.4.4", cdi=False
    )


def test_podman_says_which_oci_runtime_and_cgroup_manager_it_would_use() -> None:
    """Captured on the test machines (hybrid cgroup v1/v2, no systemd): podman picks crun,
    which cannot start a container there; the agent's runtime configuration starts from this."""
    assert parse_podman_info(fixture("podman-4.3.1-debian-hybrid.json")) == ContainerRuntime(
        "podman", "4.3.1", cdi=True, oci_runtime="crun", cgroup_manager="cgroupfs"
    )


def test_broken_answer_is_a_parse_error() -> None:
    with pytest.raises(ProbeError) as err:
        parse_docker_info("Cannot connect")
    assert err.value.kind is ProbeFailure.PARSE


def _client_without_engine(bin_dir: Path) -> None:
    """A ``docker`` that answers ``info`` as docker 28's client does with no engine: the client's
    half of the JSON on stdout, the reason on stderr, exit 1 (the captured fixture)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    path = bin_dir / "docker"
    path.write_text(
        f"#!{sys.executable}\nimport sys\n"
        f"sys.stdout.write(open({str(FIXTURES / 'docker-28.2.2-no-engine.json')!r}).read())\n"
        "sys.stderr.write('Cannot connect to the Docker daemon at unix:///var/run/docker.sock."
        " Is the docker daemon running?\\n')\nsys.exit(1)\n"
    )
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def test_a_binary_without_an_engine_is_not_a_runtime(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _client_without_engine(tmp_path / "bin")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    with pytest.raises(ProbeError) as err:
        ask_runtime("docker")
    assert err.value.kind is ProbeFailure.TOOL_FAILED
    assert "Cannot connect to the Docker daemon" in err.value.detail
    found = detect_runtime("auto")
    assert found.runtime is None
    assert [e.vendor for e in found.refused] == ["docker", "podman"]
    assert "podman not on PATH" in found.describe()


def test_auto_takes_the_first_that_answers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _client_without_engine(tmp_path / "bin")
    install(tmp_path / "bin", "podman")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    found = detect_runtime("auto")
    assert found.runtime == ContainerRuntime("podman", "5.2.1", cdi=True)
    assert found.describe() == "podman 5.2.1, CDI"


def test_explicit_choice_and_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install(tmp_path / "bin", "docker", cdi=True)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    assert detect_runtime("docker").runtime == ContainerRuntime("docker", "27.3.1", cdi=True)
    assert detect_runtime("podman").runtime is None
    assert detect_runtime("none") == detect_runtime("none")
    assert detect_runtime("none").runtime is None
