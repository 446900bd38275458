"""``submit --model`` end to end: a real ``xpupool up`` (HTTP, SQLite, in-process agent) whose
nodes differ in card, driver and container runtime, and a fake ``docker`` first on PATH that
records its argv (tests/fake_runtime.py). The model job must land on the only node whose card
has a catalogued runtime, whose driver runs that runtime's CUDA and which can run images, with
the runtime's image and command (model, tp, pp, port) in the job and in ``docker run``. Also
``GET /v1/models``, ``POST /v1/plan`` with the pool, the API's validation errors, and the model
cache (``--model-cache``): two model jobs bind the same cache directory at the runtime's path."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from server_proc import ServerProc, until
from test_agent_e2e import CLI

from fake_runtime import install, path_with, recorded

CLUSTER = """\
nodes:
  - {name: mdl-a100-old, cpu: 16, memory: 64Gi, runtime: docker, devices: [{vendor: nvidia,
     model: NVIDIA A100-SXM4-80GB, count: 4, memory: 80Gi, driver: 525.85.12,
     link_group_size: 4}]}
  - {name: mdl-910b, cpu: 16, memory: 64Gi, devices: [{vendor: huawei, model: 910B3, count: 8,
     memory: 64Gi, driver: 24.1.rc2, link_group_size: 8}]}
  - {name: mdl-mlu, cpu: 16, memory: 64Gi, runtime: docker, devices: [{vendor: cambricon,
     model: MLU370-X8, count: 8, memory: 48Gi, driver: 5.10.22}]}
  - {name: mdl-l20, cpu: 16, memory: 64Gi, runtime: docker, devices: [{vendor: nvidia,
     model: NVIDIA L20, count: 2, memory: 46068Mi, driver: 550.54.15}]}
"""


@dataclass
class Up:
    srv: ServerProc
    user: httpx.Client
    token: str
    argv_log: Any

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "XPUPOOL_URL": self.srv.url, "XPUPOOL_TOKEN": self.token}
        return subprocess.run(
            [*CLI, *args], env=env, capture_output=True, text=True, timeout=60, check=False
        )


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    tmp = tmp_path_factory.mktemp("models")
    argv_log = install(tmp / "bin", "docker")
    cluster = tmp / "cluster.yaml"
    cluster.write_text(CLUSTER)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PATH", path_with(tmp / "bin"))
        srv = ServerProc(
            tmp / "data",
            cluster=cluster,
            agent=True,
            extra_args=("--heartbeat", "0.2", "--model-cache", "models"),
        )
        with srv:
            admin = httpx.Client(base_url=srv.url, headers=srv.headers())
            admin.post("/v1/tenants", json={"name": "team"}).raise_for_status()
            cache = tmp / "models"
            cache.mkdir()
            admin.put("/v1/volumes/models", json={"path": str(cache)}).raise_for_status()
            r = admin.post("/v1/tenants/team/tokens", json={"role": "tenant"})
            r.raise_for_status()
            admin.close()
            token = r.json()["token"]
            user = httpx.Client(base_url=srv.url, headers=srv.headers(token))
            try:
                yield Up(srv, user, token, argv_log)
            finally:
                user.close()


def test_models_are_listed(up: Up) -> None:
    r = up.user.get("/v1/models")
    assert r.status_code == 200, r.text
    models = {m["name"]: m for m in r.json()}
    assert models["qwen2.5-7b"]["hub_id"] == "Qwen/Qwen2.5-7B-Instruct"
    assert models["deepseek-v3"]["active_params_b"] == 37


def test_plan_against_the_pool(up: Up) -> None:
    r = up.user.post("/v1/plan", json={"name": "qwen2.5-72b", "precision": "bf16"})
    assert r.status_code == 200, r.text
    rows = {row["device_model"]: row for row in r.json()}
    a100, l20 = rows["A100-SXM4-80GB"], rows["L20"]
    assert a100["in_pool"] == 4 and a100["tensor_parallel"] == 2
    # Free enough, but its driver 525 cannot run the runtime's CUDA: a submission is refused,
    # so the plan says no, with the same reason (issue 42: it said "fits yes").
    assert a100["fits_now"] is False and "525.85.12 too old" in a100["reason"], a100
    assert l20["in_pool"] == 2 and l20["fits_now"] is False  # needs 4 x 48 GB, the node has 2
    assert rows["H100-SXM5-80GB"]["fits_now"] is False  # in the catalog, not in the pool
    out = up.cli("plan", "--model", "qwen2.5-7b", "--context", "32k", "-o", "json")
    assert out.returncode == 0, out.stderr
    first = json.loads(out.stdout)[0]
    assert first["fits_now"] is True and first["cards"] == 1


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"model": {"name": "qwen9-1t"}}, "model.name"),
        ({"model": {"name": "qwen2.5-7b", "precision": "fp4"}}, "model.precision"),
        ({"model": {"name": "qwen2.5-7b", "context": 10**6}}, "model.context"),
        ({"model": {"name": "qwen2.5-7b", "colour": "red"}}, "model.colour"),
        ({"model": {"name": "qwen2.5-7b"}, "request": "L20:1"}, "request"),
        ({"model": {"name": "qwen2.5-7b"}, "image": "x:1"}, "image"),
        ({"model": {"name": "qwen2.5-7b", "task": "finetune"}}, "model.task"),
        ({"model": {"name": "qwen2.5-7b", "method": "lora"}}, "model.method"),
        ({"model": {"name": "bert-base"}}, "model.name"),  # no serving runtime catalogued
    ],
)
def test_model_job_errors_name_the_field(up: Up, body: dict[str, Any], field: str) -> None:
    r = up.user.post("/v1/jobs", json=body)
    assert r.status_code == 422, r.text
    assert r.json()["field"] == field, r.json()


def test_submit_model_lands_on_the_only_node_that_can_run_it(up: Up) -> None:
    out = up.cli(
        "submit", "--model", "qwen2.5-7b", "--task", "serve", "--context", "8k", "-o", "json"
    )
    assert out.returncode == 0, out.stderr
    service = json.loads(out.stdout)  # a served model is a service (docs/services.md)
    assert service["name"] == "qwen2.5-7b" and service["port"] == 8000

    def replica() -> list[Any]:
        found = up.user.get("/v1/services/qwen2.5-7b").json()["replicas"]
        return [r["job_id"] for r in found]

    (job_id,) = until(replica, "the service's replica")
    job = up.user.get(f"/v1/jobs/{job_id}").json()
    assert job["name"] == "qwen2.5-7b-1"
    image = "vllm/vllm-openai:v0.8.5"
    assert job["image"] == image
    command = [
        "--model", "Qwen/Qwen2.5-7B-Instruct", "--tensor-parallel-size", "1",
        "--pipeline-parallel-size", "1", "--port", "8000", "--max-model-len", "8192",
    ]  # fmt: skip
    assert job["command"] == command
    devices = job["request"]["devices"]
    assert devices["models"] == ["L20"] and "cuda>=12.4" in devices["software"]
    # its speeds are learned under the model's name, not the runtime's image (issue 55)
    assert job["request"]["kind"] == "qwen2.5-7b", job["request"]
    assert job["env"]["XPUPOOL_SERVE_PORT"] == "8000"

    def run() -> list[str] | None:
        runs = [a for a in recorded(up.argv_log, "run") if f"xpupool.job={job_id}" in a]
        return runs[0] if runs else None

    argv = until(run, f"docker run of job {job_id} (server log: {up.srv.log()[-2000:]})")
    assert "xpupool.node=mdl-l20" in argv
    assert argv[-len(command) - 1 :] == [image, *command]


def test_model_path_and_dry_run(up: Up) -> None:
    out = up.cli("submit", "--model", "qwen2.5-7b", "--dry-run", "-o", "json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)[0]["device_model"]  # the plan, nothing submitted
    r = up.user.post("/v1/jobs", json={"model": {"name": "qwen2.5-0.5b", "model_path": "/m/q"}})
    assert r.status_code == 201, r.text
    assert r.json()["command"][:2] == ["--model", "/m/q"]


def test_model_jobs_share_the_model_cache(up: Up) -> None:
    """Two replicas of a model on one node bind the same cache directory at the runtime's cache
    path, with HF_HOME there: the second finds what the first downloaded."""
    cache = "/root/.cache/huggingface"
    ids = []
    for _ in range(2):
        r = up.user.post("/v1/jobs", json={"model": {"name": "qwen2.5-0.5b", "context": 4096}})
        assert r.status_code == 201, r.text
        assert {"name": "models", "path": cache, "read_only": False} in r.json()["volumes"]
        ids.append(r.json()["id"])
    host = str(up.srv.data.parent / "models")

    def runs() -> list[list[str]] | None:
        found = [
            next((a for a in recorded(up.argv_log, "run") if f"xpupool.job={i}" in a), None)
            for i in ids
        ]
        return None if None in found else [a for a in found if a is not None]

    for argv in until(runs, f"docker run of jobs {ids} (server log: {up.srv.log()[-2000:]})"):
        binds = [argv[i + 1] for i, a in enumerate(argv) if a == "-v"]
        assert f"{host}:{cache}" in binds, binds
