"""Software needs from images through a real ``xpupool up`` (issue 22, part 1): simulated nodes
from a cluster file (one driver too old for CUDA 12.4, one new enough), an operator ``--catalog``
file, real HTTP and SQLite. An image job lands on the node whose driver runs the image; with only
the old node it pends (or is refused) naming the driver and the minimum; an unknown image says so
in its events; a bad catalog file stops the server at start, naming the file, line and field."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from server_proc import ROOT, ServerProc
from test_request_edge import Pool

PYTORCH = "pytorch/pytorch:2.4.0-cuda12.4-cudnn9-runtime"
TOO_OLD = "driver 525.85.12 too old for cuda>=12.4: needs >= 550.54.14"


def _node(name: str, driver: str) -> str:
    """A node of 8 A100s with a container runtime: room for every job of this module (without
    an agent, placed jobs stay placed)."""
    return (
        f"  - {{name: {name}, cpu: 64, memory: 256Gi, runtime: docker, devices: [{{vendor: "
        f"nvidia, model: NVIDIA A100-SXM4-80GB, count: 8, memory: 80Gi, driver: {driver}}}]}}\n"
    )


OLD = _node("old", "525.85.12")
NEW = _node("new", "550.54.14")
CATALOG = """\
images:
  - name: site-train
    repository: registry.example/team/train
    tag: 'cu(?P<cuda>\\d+\\.\\d+)-(?P<build>\\d+)'
    needs: ["cuda>={cuda}"]
    source: https://wiki.example/images
"""


def _start(root: Path, nodes: str) -> ServerProc:
    cluster = root / "cluster.yaml"
    cluster.write_text("nodes:\n" + nodes)
    catalog = root / "site-catalog.yaml"
    catalog.write_text(CATALOG)
    return ServerProc(root / "data", cluster=cluster, extra_args=("--catalog", str(catalog)))


def _job(pool: Pool, body: dict[str, Any]) -> int:
    r = pool.user.post("/v1/jobs", json=body)
    assert r.status_code == 201, r.text
    return int(r.json()["id"])


def _until(pool: Pool, job_id: int, done: Any) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        job: dict[str, Any] = pool.user.get(f"/v1/jobs/{job_id}").json()
        if done(job):
            return job
        time.sleep(0.1)
    raise AssertionError(f"job {job_id}: {job} ({pool.srv.log()[-2000:]})")


@pytest.fixture(scope="module")
def both(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pool]:
    with _start(tmp_path_factory.mktemp("both"), OLD + NEW) as srv:
        pool = Pool(srv)
        yield pool
        pool.close()


@pytest.fixture(scope="module")
def only_old(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pool]:
    with _start(tmp_path_factory.mktemp("old"), OLD) as srv:
        pool = Pool(srv)
        yield pool
        pool.close()


def test_the_image_lands_on_the_driver_that_runs_it(both: Pool) -> None:
    for _ in range(2):  # twice: the old node has room for both, so only the need decides
        job_id = _job(both, {"image": PYTORCH, "spec": "A100:1"})
        job = _until(both, job_id, lambda j: j["assignments"])
        assert job["assignments"][0]["node"] == "new"
        reasons = [e["reason"] for e in job["events"]]
        assert any("software needs cuda>=12.4, torch==2.4.0 added" in r for r in reasons)


def test_an_operator_rule_is_read_first(both: Pool) -> None:
    job_id = _job(both, {"image": "registry.example/team/train:cu12.4-7", "spec": "A100:1"})
    job = _until(both, job_id, lambda j: j["assignments"])
    assert job["assignments"][0]["node"] == "new"
    reasons = [e["reason"] for e in job["events"]]
    assert any("site-catalog.yaml: site-train" in r and "cuda>=12.4" in r for r in reasons)


def test_an_unknown_image_says_so_in_its_events(both: Pool) -> None:
    job_id = _job(both, {"image": "registry.example/other:1", "spec": "A100:1"})
    job = _until(both, job_id, lambda j: j["assignments"])
    reasons = [e["reason"] for e in job["events"]]
    assert "no catalog rule knows image registry.example/other:1: no software needs added" in (
        reasons
    )


def test_with_only_the_old_driver_it_pends_naming_the_minimum(only_old: Pool) -> None:
    r = only_old.user.post("/v1/jobs", json={"image": PYTORCH, "spec": "A100:1"})
    assert r.status_code == 422, r.text
    assert r.json()["field"] == "image" and TOO_OLD in r.json()["reason"]
    keeps = {"name": "lab", "tenant": "lab", "allow_unfittable": True}
    assert only_old.admin.put("/v1/queues/lab", json=keeps).status_code == 200
    job_id = _job(only_old, {"image": PYTORCH, "spec": "A100:1"})
    job = _until(only_old, job_id, lambda j: j["reason"] != "waiting for the scheduler")
    assert job["state"] == "pending" and TOO_OLD in job["reason"], job


# ------------------------------------------------------------------ a bad catalog stops the start
@pytest.mark.parametrize(
    ("old", "new", "where"),
    [
        (
            "    source: https://wiki",
            "    sorce: https://wiki",
            ":6: images[0] (site-train): sorce:",
        ),
        ("(?P<cuda>", "(?P<cuda", ":4: images[0] (site-train): tag: not a valid regular"),
        ('["cuda>={cuda}"]', '["cuda>=twelve"]', ":5: images[0] (site-train): needs:"),
    ],
)
def test_a_bad_catalog_stops_the_server(tmp_path: Path, old: str, new: str, where: str) -> None:
    assert old in CATALOG
    catalog = tmp_path / "bad.yaml"
    catalog.write_text(CATALOG.replace(old, new, 1))
    data = tmp_path / "data"
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "from xpupool.cli import main; main()",
            "up",
            "--no-agent",
            "--data",
            str(data),
            "--port",
            "0",
            "--catalog",
            str(catalog),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=ROOT,
    )
    output = done.stdout + done.stderr
    assert done.returncode != 0, output
    assert f"{catalog}{where}" in output, output
    assert not (data / "state.db").exists()  # refused before anything was opened


def test_a_good_catalog_is_announced(both: Pool) -> None:
    assert "site-catalog.yaml (1 image rules, tried first)" in both.srv.log()
    assert httpx.get(f"{both.srv.url}/healthz", timeout=10).status_code == 200
