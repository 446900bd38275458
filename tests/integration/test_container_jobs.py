"""Image jobs against a real ``xpupool up`` (real HTTP, SQLite, in-process agent with real job
processes) and a real ``xpupool agent`` subprocess, with a fake ``docker`` first on PATH that
answers ``info`` like an engine, records each argv and runs the command after the image locally
(tests/fake_runtime.py). Kept here: what a real engine on these machines cannot show: the ``run``
argv per vendor's cards (devices, user, env file, limits, name), the runtime each node reports
and how ``--runtime auto`` picks one, the refusals at submit, and an image's own entry point.
What the container does on a real engine (uid, env, working directory, limits, output, exit
codes, stop, restarts, leftovers) is tested on podman: test_container_engine.py and
test_container_lifecycle.py."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from server_proc import ServerProc, stop_process, until
from test_agent_e2e import FAKE

from fake_runtime import install, path_with, recorded

CLUSTER = """\
nodes:
  - {name: img-a100, cpu: 16, memory: 64Gi, runtime: docker, devices: [{vendor: nvidia,
     model: NVIDIA A100-SXM4-80GB, count: 4, memory: 80Gi, driver: 550.54.15}]}
  - {name: img-910b, cpu: 16, memory: 64Gi, runtime: docker, devices: [{vendor: huawei,
     model: 910B3, count: 8, memory: 64Gi, driver: 24.1.rc2}]}
  - {name: img-mi300, cpu: 16, memory: 64Gi, runtime: docker, devices: [{vendor: amd,
     model: AMD Instinct MI300X, count: 8, memory: 192Gi, driver: 6.7.0}]}
  - {name: img-mlu, cpu: 16, memory: 64Gi, runtime: docker, devices: [{vendor: cambricon,
     model: MLU370-X8, count: 8, memory: 48Gi, driver: 5.10.22}]}
  - {name: plain-l20, cpu: 16, memory: 64Gi, devices: [{vendor: nvidia, model: NVIDIA L20,
     count: 2, memory: 46068Mi, driver: 535.104.05}]}
"""
NO_RUNTIME_CLUSTER = Path(__file__).parents[1] / "fixtures" / "agent" / "cluster-sim.yaml"
SH = "/bin/sh"  # the in-process agent runs as root here: jobs run as a tenant uid


def _no_engine(bin_dir: Path) -> None:
    """``docker`` and ``podman`` that answer ``info`` as a client without an engine does, so
    ``--runtime auto`` finds nothing whatever this machine has installed."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name in ("docker", "podman"):
        path = bin_dir / name
        path.write_text("#!/bin/sh\necho 'Cannot connect to the Docker daemon' >&2\nexit 1\n")
        path.chmod(path.stat().st_mode | stat.S_IXUSR)


@dataclass
class Up:
    srv: ServerProc
    user: httpx.Client
    argv_log: Path

    def submit(self, body: dict[str, Any]) -> int:
        r = self.user.post("/v1/jobs", json=body)
        assert r.status_code == 201, r.text
        return int(r.json()["id"])

    def job(self, job_id: int) -> dict[str, Any]:
        return dict(self.user.get(f"/v1/jobs/{job_id}").json())

    def wait(self, job_id: int, state: str, timeout_s: float = 30.0) -> dict[str, Any]:
        return dict(
            until(
                lambda: (j := self.job(job_id))["state"] == state and j,
                f"job {job_id} {state} (server log: {self.srv.log()[-3000:]})",
                timeout_s,
            )
        )

    def logs(self, job_id: int) -> str:
        return self.user.get(f"/v1/jobs/{job_id}/logs").text

    def run_argv(self, job_id: int) -> list[str]:
        """The recorded ``docker run`` of this job (its container is named after it)."""
        runs = [a for a in recorded(self.argv_log, "run") if f"xpupool.job={job_id}" in a]
        assert len(runs) == 1, recorded(self.argv_log)
        return runs[0]


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    tmp = tmp_path_factory.mktemp("images")
    argv_log = install(tmp / "bin", "docker")
    cluster = tmp / "cluster.yaml"
    cluster.write_text(CLUSTER)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PATH", path_with(tmp / "bin"))
        srv = ServerProc(
            tmp / "data", cluster=cluster, agent=True, extra_args=("--heartbeat", "0.2")
        )
        with srv:
            user = srv.tenant_client("team")
            try:
                yield Up(srv, user, argv_log)
            finally:
                user.close()


def _option(argv: list[str], key: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == key]


def test_nodes_report_their_runtime(up: Up) -> None:
    nodes = {n["name"]: n for n in up.user.get("/v1/nodes").json()}
    assert {n: nodes[n]["runtime"] for n in nodes if n.startswith(("img-", "plain-"))} == {
        "img-a100": "docker",
        "img-910b": "docker",
        "img-mi300": "docker",
        "img-mlu": "docker",
        "plain-l20": None,
    }
    local = [n for n in nodes.values() if n["source"] == "agent"]
    assert [n["runtime"] for n in local] == ["docker"]  # asked at start: the fake answered


@pytest.mark.parametrize(
    ("spec", "node", "devices"),
    [
        ("nvidia:A100:2", "img-a100", None),
        ("910B:2", "img-910b", ["davinci_manager", "devmm_svm", "hisi_hdc"]),
        ("amd:2", "img-mi300", ["kfd"]),
        ("cambricon:2", "img-mlu", ["cambricon_ctl"]),
    ],
)
def test_image_job_runs_through_the_runtime(
    up: Up, spec: str, node: str, devices: list[str] | None
) -> None:
    script = 'echo "hello from $XPUPOOL_NODE idx=$XPUPOOL_DEVICE_INDICES"; echo "$MY_VAR"'
    job_id = up.submit(
        {
            "image": "registry.example/train:1",
            "command": [SH, "-c", script],
            "env": {"MY_VAR": "my-value"},
            "spec": f"{spec} cpu=2 memory=4Gi",
        }
    )
    up.wait(job_id, "succeeded")
    logs = until(lambda: "my-value" in (t := up.logs(job_id)) and t, "the job's output")
    found = re.search(rf"hello from {node} idx=([0-9,]+)", logs)
    assert found, logs
    indices = [int(i) for i in found.group(1).split(",")]
    argv = up.run_argv(job_id)
    assert argv[:4] == ["docker", "run", "--rm", "--init"]
    name = _option(argv, "--name")[0]
    assert name.startswith(f"xpupool-{node}-{job_id}-0-")  # + a suffix unique to the run
    user = _option(argv, "--user")[0]
    assert user != "0:0" and int(user.split(":")[0]) >= 200000  # a tenant uid, never root
    env_file = Path(_option(argv, "--env-file")[0])
    assert not env_file.exists()  # removed with the container
    assert _option(argv, "--cpus") == ["2"] and _option(argv, "--memory") == ["4096m"]
    assert argv[-3:] == [SH, "-c", script] and argv[-4] == "registry.example/train:1"
    assert "my-value" not in " ".join(argv)  # the job's env goes through the file, not ps
    if devices is None:  # NVIDIA through the toolkit, by UUID (no CDI on this engine)
        uuids = ",".join(f"{node}-{i}" for i in indices)
        assert _option(argv, "--gpus") == [f'"device={uuids}"']
    else:
        passed = [d.split(":")[1].removeprefix("/dev/") for d in _option(argv, "--device")]
        per_card = {
            "img-910b": [f"davinci{i}" for i in indices],
            "img-mi300": [f"dri/renderD{128 + i}" for i in indices],
            "img-mlu": [f"cambricon_dev{i}" for i in indices],
        }[node]
        assert set(passed) == {*per_card, *devices}, argv
    assert [a for a in recorded(up.argv_log, "rm") if name in a]  # cleanup by name


def test_image_only_job_runs_the_entry_point(up: Up) -> None:
    job_id = up.submit({"image": "hello-world", "spec": "cambricon:1"})
    up.wait(job_id, "succeeded")
    assert up.run_argv(job_id)[-1] == "hello-world"  # nothing after the image
    until(lambda: "hello from the image" in up.logs(job_id), "the entry point's output")


def test_image_job_for_cards_only_on_nodes_without_a_runtime_is_refused(up: Up) -> None:
    """The L20 node has no runtime: the job could never start, so it is refused now, naming
    where the runtimes are (issue 42: it was accepted and waited for ever)."""
    body = {"image": "busybox", "command": ["true"], "spec": "L20:1"}
    r = up.user.post("/v1/jobs", json=body)
    assert r.status_code == 422, r.text
    assert r.json()["field"] == "image"
    assert "no node with NVIDIA L20 cards has a container runtime" in r.json()["reason"]


# ------------------------------------------------------------------ no runtime anywhere
@pytest.fixture(scope="module")
def bare(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProc, httpx.Client]]:
    """A pool where no node has a runtime: simulated nodes that declare none, and a local host
    whose docker and podman do not answer (whatever this machine has installed)."""
    tmp = tmp_path_factory.mktemp("no-images")
    _no_engine(tmp / "bin")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PATH", path_with(tmp / "bin"))
        srv = ServerProc(
            tmp / "data", cluster=NO_RUNTIME_CLUSTER, agent=True, extra_args=("--heartbeat", "0.2")
        )
        with srv:
            user = srv.tenant_client("team")
            try:
                yield srv, user
            finally:
                user.close()


def test_image_job_is_refused_naming_image_and_the_reason(
    bare: tuple[ServerProc, httpx.Client],
) -> None:
    """Before: accepted, then 'failed: replica 0 exited with 0' (pid None), the reason only in
    its log."""
    _, user = bare
    r = user.post("/v1/jobs", json={"image": "busybox", "command": ["true"], "spec": "910B:1"})
    assert r.status_code == 422, r.text
    assert r.json()["field"] == "image"
    assert "no node has a container runtime" in r.json()["reason"]


def test_job_without_command_or_image_is_refused_naming_command(
    bare: tuple[ServerProc, httpx.Client],
) -> None:
    _, user = bare
    r = user.post("/v1/jobs", json={"spec": "910B:1"})
    assert r.status_code == 422, r.text
    assert r.json()["field"] == "command"


# ------------------------------------------------------------------ a standalone agent
def test_standalone_agent_asks_its_runtime_and_runs_images(tmp_path: Path) -> None:
    argv_log = install(tmp_path / "bin", "podman")
    _no_engine(tmp_path / "nodocker")
    os.remove(tmp_path / "nodocker" / "podman")
    path = f"{tmp_path / 'nodocker'}{os.pathsep}{path_with(tmp_path / 'bin')}"
    with ServerProc(tmp_path / "data", extra_args=("--heartbeat", "0.2")) as srv:
        admin = httpx.Client(base_url=srv.url, headers=srv.headers())
        user = srv.tenant_client("ops")
        env = {**os.environ, "PATH": path}
        agent, agent_log = srv.start_agent(tmp_path, "box", FAKE, "--runtime", "auto", env=env)
        try:
            node = until(
                lambda: (r := admin.get("/v1/nodes/box")).status_code == 200 and r.json(),
                f"registration ({agent_log})",
            )
            assert node["runtime"] == "podman"  # docker did not answer, podman did
            assert "images: podman" in agent_log.read_text()
            r = user.post(
                "/v1/jobs",
                json={"image": "busybox", "command": [SH, "-c", "echo boxed"], "spec": "A100:1"},
            )
            assert r.status_code == 201, r.text
            job_id = r.json()["id"]
            until(
                lambda: user.get(f"/v1/jobs/{job_id}").json()["state"] == "succeeded",
                f"the image job ({agent_log.read_text()[-2000:]})",
                30,
            )
            assert "boxed" in user.get(f"/v1/jobs/{job_id}/logs").text
            run = [a for a in recorded(argv_log, "run") if a[0] == "podman"]
            assert len(run) == 1
            assert _option(run[0], "--device")[0].startswith("nvidia.com/gpu=")  # podman: CDI
        finally:
            stop_process(agent)
            admin.close()
            user.close()


def test_unknown_runtime_name_in_a_cluster_file_is_refused(tmp_path: Path) -> None:
    cluster = tmp_path / "c.yaml"
    cluster.write_text("nodes:\n  - {name: n, cpu: 1, memory: 1Gi, runtime: lxc}\n")
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "from xpupool.cli import main; main()",
            "up",
            "--no-agent",
            "--data",
            str(tmp_path / "d"),
            "--cluster",
            str(cluster),
            "--port",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0
    assert "nodes[0].runtime" in done.stdout + done.stderr
