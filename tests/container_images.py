"""The images every test on a real container engine runs, built here: nothing can be pulled.

``busybox``: Debian's busybox-static (one static binary) and links for its applets, made into an
image with ``podman import``; it has ``sh``, ``nc``, ``id`` and what a shell job needs. Its tag is
a digest of what goes in (the applets and the binary's size), so an image built by an older list
is never taken for the current one; it is built only when ``podman image exists`` says it is
missing, and the build time is printed. ``.ci/run`` builds it in a stage of its own
(``python3 tests/container_images.py``), so its time is on its own line. In CI a missing engine
or busybox is a failure, never a skip (:func:`require_podman`).

:func:`podman` runs podman the way the agent does on this host: with the runtime configuration
the agent detects (:mod:`xpupool.agent.launch.runtime_config`), never one of the tests' own.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import pytest

BUSYBOX = Path("/bin/busybox")  # Debian's busybox-static
APPLETS = (
    "sh", "id", "echo", "cat", "ls", "sleep", "chroot", "env", "true", "false", "pwd", "nc",
    "touch", "stat", "kill", "grep", "head", "printf", "test", "wc", "tr",
)  # fmt: skip
REPOSITORY = "localhost/xpupool-test/busybox"
SERVICES = Path(__file__).parent / "fixtures" / "services"
STUB_SOURCE = SERVICES / "stub"
LOAD_SOURCE = SERVICES / "load"  # bench/service_proxy.py's load generator
STUB_REPOSITORY = "localhost/xpupool-test/stub"
STUB_ENTRYPOINT = 'ENTRYPOINT ["/stub"]'  # exec form: the image has no shell
STUB_CACHE = Path.home() / ".cache" / "xpupool-test"  # outside the repository: not carried


def require_podman() -> None:
    assert shutil.which("podman"), "podman is needed (Debian: apt-get install podman runc)"
    assert BUSYBOX.exists(), "busybox-static is needed (Debian: apt-get install busybox-static)"


def busybox_tag() -> str:
    content = f"{BUSYBOX.stat().st_size}:{','.join(APPLETS)}"
    return f"{REPOSITORY}:{hashlib.sha256(content.encode()).hexdigest()[:12]}"


def _podman_plain(*args: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["podman", *args], capture_output=True, text=True, timeout=timeout_s, check=False
    )


def _busybox_rootfs(path: Path) -> None:
    with tarfile.open(path, "w") as tar:
        info = tar.gettarinfo(str(BUSYBOX), arcname="bin/busybox")
        with BUSYBOX.open("rb") as f:
            tar.addfile(info, f)
        for applet in APPLETS:
            link = tarfile.TarInfo(f"bin/{applet}")
            link.type, link.linkname = tarfile.SYMTYPE, "busybox"
            tar.addfile(link)
        for name in ("tmp", "etc"):
            d = tarfile.TarInfo(name)
            d.type, d.mode = tarfile.DIRTYPE, 0o1777 if name == "tmp" else 0o755
            tar.addfile(d)


def ensure_busybox_image() -> str:
    """The busybox image's name, imported first if this engine lacks it."""
    require_podman()
    tag = busybox_tag()
    if _podman_plain("image", "exists", tag).returncode == 0:
        return tag
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="xpupool-image-") as tmp:
        root = Path(tmp) / "rootfs.tar"
        _busybox_rootfs(root)
        done = _podman_plain("import", str(root), tag)
    assert done.returncode == 0, f"podman import: {done.stderr}"
    print(f"test image {tag}: built in {time.monotonic() - start:.1f} s", file=sys.stderr)
    return tag


def engine_args() -> tuple[list[str], list[str]]:
    """The options the agent would give podman here: before the verb, and after ``run``."""
    from xpupool.agent.launch.cgroups import DEFAULT_PIDS_MAX
    from xpupool.agent.launch.runtime_config import detect_runtime_config
    from xpupool.probes.container_runtime import ask_runtime

    config = detect_runtime_config(ask_runtime("podman"), DEFAULT_PIDS_MAX)
    return list(config.global_args), list(config.run_args)


def podman(*args: str, timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
    """``podman ARGS`` with the agent's configuration for this host (``run`` gets its run
    options too)."""
    global_args, run_args = engine_args()
    argv = ["podman", *global_args, *args]
    if args and args[0] == "run":
        argv = ["podman", *global_args, "run", *run_args, *args[1:]]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)


def containers(label: str) -> list[str]:
    """Names of the containers (running or not) with ``label`` (``KEY=VALUE``)."""
    done = podman("ps", "-a", "--filter", f"label={label}", "--format", "{{.Names}}")
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


@pytest.fixture(scope="session")
def busybox_image() -> str:
    """The busybox test image, built once per engine (see the module docstring)."""
    return ensure_busybox_image()


def source_hash(source: Path = STUB_SOURCE) -> str:
    """A digest of a Go program's source: its binary (and the stub's image) are named by it."""
    digest = hashlib.sha256()
    for path in sorted(source.iterdir()):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


def stub_hash() -> str:
    return source_hash(STUB_SOURCE)


def stub_binary() -> Path:
    """The stub server (``tests/fixtures/services/stub``, an OpenAI-compatible test server in Go,
    static): :func:`go_binary`."""
    return go_binary(STUB_SOURCE)


def go_binary(source: Path) -> Path:
    """The Go program in ``source`` (standard library only), built static with this machine's
    ``go`` into a cache outside the repository, keyed by its source's digest, only when
    missing."""
    out = STUB_CACHE / f"{source.name}-{source_hash(source)}" / source.name
    if out.exists():
        return out
    go = shutil.which("go") or "/usr/local/go/bin/go"
    assert Path(go).exists(), f"go is needed to build {source.name} ({source})"
    start = time.monotonic()
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_suffix(".partial")
    env = {**os.environ, "CGO_ENABLED": "0"}
    done = subprocess.run(
        [go, "build", "-trimpath", "-o", str(partial), "."],
        cwd=source,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, f"go build of {source}: {done.stderr}"
    partial.replace(out)  # whole or absent: a build cut short is never taken
    print(f"{source.name} {out}: built in {time.monotonic() - start:.1f} s", file=sys.stderr)
    return out


def ensure_stub_image() -> str:
    """The stub server as an image (FROM scratch: the static binary alone, at /stub), imported
    first if this engine lacks it."""
    require_podman()
    recipe = hashlib.sha256(f"{stub_hash()}:{STUB_ENTRYPOINT}".encode()).hexdigest()[:12]
    tag = f"{STUB_REPOSITORY}:{recipe}"  # a new source or a new recipe: a new image
    if _podman_plain("image", "exists", tag).returncode == 0:
        return tag
    binary = stub_binary()
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="xpupool-image-") as tmp:
        root = Path(tmp) / "rootfs.tar"
        with tarfile.open(root, "w") as tar:
            info = tar.gettarinfo(str(binary), arcname="stub")
            info.mode = 0o755
            with binary.open("rb") as f:
                tar.addfile(info, f)
        done = _podman_plain("import", "--change", STUB_ENTRYPOINT, str(root), tag)
    assert done.returncode == 0, f"podman import: {done.stderr}"
    print(f"test image {tag}: built in {time.monotonic() - start:.1f} s", file=sys.stderr)
    return tag


if __name__ == "__main__":  # .ci/run's image stage
    print(ensure_busybox_image())
    print(ensure_stub_image())
