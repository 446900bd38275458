"""Which container runtime this host can run image jobs with, found by asking it.

A ``docker`` binary on PATH proves nothing: the client is often installed without an engine (the
project's CI machines have exactly that: ``docker info`` exits 1 with "Cannot connect to the Docker
daemon"), so a runtime counts only when ``docker info`` / ``podman info`` answers, within a timeout,
with a server version. The answer also decides how NVIDIA cards are passed: through CDI
(``--device nvidia.com/gpu=UUID``) where the runtime reads CDI specs, else docker's ``--gpus``.
Running is kept apart from parsing (STYLE section 3): the parsers are pure functions of the JSON
the runtimes print (fixtures in ``tests/fixtures/probes/container_runtime/``).
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from typing import Literal

from xpupool.probes.base import ProbeError, ProbeFailure

RuntimeName = Literal["docker", "podman"]
RuntimeChoice = Literal["auto", "docker", "podman", "none"]
RUNTIME_CHOICES: tuple[RuntimeChoice, ...] = ("auto", "docker", "podman", "none")
AUTO_ORDER: tuple[RuntimeName, ...] = ("docker", "podman")
DEFAULT_TIMEOUT_S = 10.0

# ``docker info --format '{{json .}}'`` prints the Engine API's SystemInfo (ServerVersion,
# CDISpecDirs: "An empty list indicates that CDI device injection is disabled", Docker Engine API
# v1.57 SystemInfo schema); ``podman info --format json`` nests the version under version.Version.
INFO_ARGV: dict[RuntimeName, tuple[str, ...]] = {
    "docker": ("info", "--format", "{{json .}}"),
    "podman": ("info", "--format", "json"),
}


@dataclass(frozen=True, slots=True)
class ContainerRuntime:
    """A runtime that answered. ``name`` is also the command the agent runs; ``version`` is the
    server's, as printed; ``cdi`` is True when ``--device vendor.com/class=name`` works: podman
    reads CDI specs from 4.1 on, docker from 25 on and only when the daemon enables CDI.
    ``oci_runtime`` and ``cgroup_manager`` are what the engine would use when told nothing (podman
    reports ``host.ociRuntime.name`` and ``host.cgroupManager``, docker ``DefaultRuntime`` and
    ``CgroupDriver``; "" where it did not say): the agent's runtime configuration starts from
    them (:mod:`xpupool.agent.launch.runtime_config`)."""

    name: RuntimeName
    version: str
    cdi: bool
    oci_runtime: str = ""
    cgroup_manager: str = ""


def _major_minor(version: str) -> tuple[int, int]:
    parts = [*version.split("-", 1)[0].split("."), "0", "0"][:2]
    try:
        return int(parts[0]), int(parts[1])
    except ValueError:
        return 0, 0


def _json_object(name: str, text: str) -> dict[str, object]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ProbeError(name, f"{name} info", ProbeFailure.PARSE, f"not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ProbeError(name, f"{name} info", ProbeFailure.PARSE, "expected a JSON object")
    return data


def parse_docker_info(text: str) -> ContainerRuntime | None:
    """The runtime ``docker info --format '{{json .}}'`` describes; None when it names no server
    (the client alone prints its own half with an empty ServerVersion)."""
    data = _json_object("docker", text)
    version = data.get("ServerVersion")
    if not isinstance(version, str) or not version:
        return None
    spec_dirs = data.get("CDISpecDirs")
    cdi = isinstance(spec_dirs, list) and bool(spec_dirs) and _major_minor(version) >= (25, 0)
    return ContainerRuntime(
        "docker", version, cdi, _text(data.get("DefaultRuntime")), _text(data.get("CgroupDriver"))
    )


def parse_podman_info(text: str) -> ContainerRuntime | None:
    """The runtime ``podman info --format json`` describes; None without a version."""
    data = _json_object("podman", text)
    block = data.get("version")
    version = block.get("Version") if isinstance(block, dict) else None
    if not isinstance(version, str) or not version:
        return None
    host = data.get("host")
    host = host if isinstance(host, dict) else {}
    oci = host.get("ociRuntime")
    return ContainerRuntime(
        "podman",
        version,
        _major_minor(version) >= (4, 1),
        _text(oci.get("name")) if isinstance(oci, dict) else "",
        _text(host.get("cgroupManager")),
    )


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


PARSERS = {"docker": parse_docker_info, "podman": parse_podman_info}


def ask_runtime(name: RuntimeName, timeout_s: float = DEFAULT_TIMEOUT_S) -> ContainerRuntime:
    """Run ``<name> info``; raises ProbeError saying why the runtime cannot be used (not on PATH,
    no answer in ``timeout_s``, a non-zero exit such as no engine, no server version)."""
    argv = [name, *INFO_ARGV[name]]
    command = " ".join(argv[:2])
    try:
        done = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env={**os.environ, "LC_ALL": "C"},
            check=False,
        )
    except FileNotFoundError:
        raise ProbeError(name, command, ProbeFailure.TOOL_MISSING, f"{name} not on PATH") from None
    except PermissionError as exc:
        raise ProbeError(name, command, ProbeFailure.PERMISSION, str(exc)) from None
    except subprocess.TimeoutExpired:
        raise ProbeError(
            name, command, ProbeFailure.TIMEOUT, f"no answer in {timeout_s:g} s"
        ) from None
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines()
        detail = lines[-1] if lines else f"exit code {done.returncode}"
        raise ProbeError(name, command, ProbeFailure.TOOL_FAILED, detail)
    found = PARSERS[name](done.stdout)
    if found is None:
        raise ProbeError(name, command, ProbeFailure.PARSE, "no server version in the answer")
    return found


@dataclass(frozen=True, slots=True)
class RuntimeDetection:
    """What ``--runtime`` found: the runtime (None: image jobs cannot run here) and, for each
    runtime asked that could not be used, why (for the agent's start-up line and log)."""

    runtime: ContainerRuntime | None
    refused: tuple[ProbeError, ...] = ()

    def describe(self) -> str:
        if self.runtime is not None:
            cdi = ", CDI" if self.runtime.cdi else ""
            return f"{self.runtime.name} {self.runtime.version}{cdi}"
        if not self.refused:
            return "none (--runtime none)"
        return "none (" + "; ".join(f"{e.command}: {e.detail}" for e in self.refused) + ")"


def detect_runtime(choice: RuntimeChoice, timeout_s: float = DEFAULT_TIMEOUT_S) -> RuntimeDetection:
    """``auto``: docker, then podman, the first that answers. ``docker``/``podman``: that one or
    none (the caller decides whether an explicit choice that fails is fatal). ``none``: never ask."""
    if choice == "none":
        return RuntimeDetection(None)
    names: tuple[RuntimeName, ...] = AUTO_ORDER if choice == "auto" else (choice,)
    refused: list[ProbeError] = []
    for name in names:
        try:
            return RuntimeDetection(ask_runtime(name, timeout_s), tuple(refused))
        except ProbeError as exc:
            refused.append(exc)
    return RuntimeDetection(None, tuple(refused))
