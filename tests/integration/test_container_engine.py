"""Image jobs on a real container engine: Debian's podman, driven by a real ``xpupool up`` and its
in-process agent (issue 43, item 2).

The image is made here from a busybox-static root filesystem with ``podman import`` (nothing can
be pulled). This machine's podman needs runc, the cgroupfs manager and explicit ulimits below the
hard limits (crun refuses its hybrid cgroup layout); an operator says so in containers.conf, the
test through ``CONTAINERS_CONF``, which the agent passes on to the runtime's client.

The exploit: ``{"image": "--privileged", "command": ["--user=0:0", "--volume=/:/host", IMAGE,
"chroot", "/host", "id"]}`` was accepted and the agent's ``podman run ... --privileged
--user=0:0 --volume=/:/host IMAGE chroot /host id`` ran as root with the host's ``/`` mounted.
In CI podman is installed by .ci/run: a missing engine fails these tests.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from server_proc import ServerProc, until

IMAGE = "localhost/xpupool-test/busybox:1"
BUSYBOX = Path("/bin/busybox")  # Debian's busybox-static: one static binary, no libraries
APPLETS = ("sh", "id", "echo", "cat", "ls", "sleep", "chroot", "env", "true")
CONTAINERS_CONF = """\
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=4096:4096"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
"""
CLUSTER = """\
nodes:
  - {name: box, cpu: 4, memory: 8Gi, runtime: podman}
"""
ROOT = os.geteuid() == 0


def _podman(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["podman", *args], capture_output=True, text=True, env=env, timeout=120, check=False
    )


@pytest.fixture(scope="module")
def engine_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment the server runs with: podman configured for this machine, and the test
    image imported (once)."""
    assert shutil.which("podman"), "podman is needed (Debian: apt-get install podman runc)"
    assert BUSYBOX.exists(), "busybox-static is needed (Debian: apt-get install busybox-static)"
    tmp = tmp_path_factory.mktemp("engine")
    conf = tmp / "containers.conf"
    conf.write_text(CONTAINERS_CONF)
    env = {**os.environ, "CONTAINERS_CONF": str(conf)}
    if _podman("image", "exists", IMAGE, env=env).returncode != 0:
        root = tmp / "rootfs.tar"
        with tarfile.open(root, "w") as tar:
            info = tar.gettarinfo(str(BUSYBOX), arcname="bin/busybox")
            with BUSYBOX.open("rb") as f:
                tar.addfile(info, f)
            for applet in APPLETS:
                link = tarfile.TarInfo(f"bin/{applet}")
                link.type, link.linkname = tarfile.SYMTYPE, "busybox"
                tar.addfile(link)
        done = _podman("import", str(root), IMAGE, env=env)
        assert done.returncode == 0, done.stderr
    return env


@dataclass
class Engine:
    srv: ServerProc
    user: httpx.Client

    def submit(self, body: dict[str, Any]) -> httpx.Response:
        return self.user.post("/v1/jobs", json={"spec": "cpu=100m", **body})

    def finished(self, job_id: int) -> dict[str, Any]:
        return dict(
            until(
                lambda: (
                    (j := self.user.get(f"/v1/jobs/{job_id}").json())["state"]
                    in ("succeeded", "failed", "cancelled", "lost")
                    and j
                ),
                f"job {job_id} to end ({self.srv.log()[-3000:]})",
                120,
            )
        )

    def logs(self, job_id: int) -> str:
        return self.user.get(f"/v1/jobs/{job_id}/logs").text


@pytest.fixture(scope="module")
def engine(
    tmp_path_factory: pytest.TempPathFactory, engine_env: dict[str, str]
) -> Iterator[Engine]:
    tmp = tmp_path_factory.mktemp("podman-up")
    cluster = tmp / "cluster.yaml"
    cluster.write_text(CLUSTER)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CONTAINERS_CONF", engine_env["CONTAINERS_CONF"])
        srv = ServerProc(
            tmp / "data", cluster=cluster, agent=True, extra_args=("--heartbeat", "0.2")
        )
        with srv:
            user = srv.tenant_client("mallory")
            try:
                yield Engine(srv, user)
            finally:
                user.close()


def test_an_image_job_runs_on_podman_as_the_tenant(engine: Engine) -> None:
    r = engine.submit({"image": IMAGE, "command": ["sh", "-c", "id -u; echo inside"]})
    assert r.status_code == 201, r.text
    job = engine.finished(r.json()["id"])
    assert job["state"] == "succeeded", (job, engine.logs(job["id"]))
    text = engine.logs(job["id"])
    assert "inside" in text
    uid = text.split()[0]
    assert uid != "0", text  # never the image's root
    if ROOT:
        assert int(uid) >= 200000, text  # the tenant's uid of the job uid range


def test_an_image_that_is_a_runtime_option_is_refused_and_nothing_runs_as_root(
    engine: Engine,
) -> None:
    hostile = {
        "image": "--privileged",
        "command": ["--user=0:0", "--volume=/:/host", IMAGE, "chroot", "/host", "/usr/bin/id"],
    }
    r = engine.submit(hostile)
    if r.status_code == 201:  # what it did before: say how far it got
        job = engine.finished(r.json()["id"])
        pytest.fail(f"accepted; it ended {job['state']}: {engine.logs(job['id'])[-500:]}")
    assert r.status_code == 422, r.text
    assert r.json()["field"] == "image"
    assert "not an image reference" in r.json()["reason"]


def test_options_in_the_command_stay_the_containers_arguments(engine: Engine) -> None:
    """A well-formed image with runtime options as its command: the runtime must not read them
    (the image comes after every option and '--'), so the container runs ``--privileged`` as a
    program, which does not exist, and nothing runs as root."""
    r = engine.submit({"image": IMAGE, "command": ["--privileged", "--user=0:0", "id"]})
    assert r.status_code == 201, r.text
    job = engine.finished(r.json()["id"])
    assert job["state"] == "failed", (job, engine.logs(job["id"]))
    assert "uid=0" not in engine.logs(job["id"])
