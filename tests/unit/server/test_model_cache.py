"""The operator's model cache (``xpupool up --model-cache VOLUME``): a model job mounts the
declared volume read-write at its runtime's cache path with the runtime's variable pointing there,
and its view shows the mount; a job that mounts something there, sets the variable, or may not
mount the volume keeps what it asked for, and an undeclared cache adds nothing."""

from __future__ import annotations

from typing import Any

import pytest
from server_kit import Server, job, node, queue, tenant

CACHE = "/root/.cache/huggingface"  # the vLLM runtimes' (catalog/data/models.yaml)
MODEL = {"model": {"name": "qwen2.5-0.5b", "context": 4096}}


def declare(srv: Server, name: str, **body: Any) -> None:
    r = srv.client.put(f"/v1/volumes/{name}", json={"path": "/srv/m", **body}, headers=srv.admin)
    assert r.status_code == 201, r.text


def submit(srv: Server, token: str, **extra: Any) -> dict[str, Any]:
    r = srv.client.post("/v1/jobs", json={**MODEL, **extra}, headers=srv.as_(token))
    assert r.status_code == 201, r.text
    return dict(r.json())


@pytest.fixture
def team(server: Server) -> str:
    node(server, "s1", count=2, runtime="docker")
    return tenant(server, "team")


@pytest.mark.slow
def test_a_model_job_mounts_the_cache_at_its_runtime_path(server: Server, team: str) -> None:
    server.plane.model_cache = "models"
    declare(server, "models", path="/srv/{node}/models")
    created = submit(server, team)
    assert created["volumes"] == [{"name": "models", "path": CACHE, "read_only": False}]
    assert created["env"]["HF_HOME"] == CACHE
    shown = job(server, created["id"], team)  # the job's view, as stored
    assert shown["volumes"] == created["volumes"] and shown["env"]["HF_HOME"] == CACHE
    server.schedule()
    placed = job(server, created["id"], team)
    assert placed["state"] in ("scheduled", "running"), placed


@pytest.mark.slow
def test_no_cache_set_or_declared_adds_nothing(server: Server, team: str) -> None:
    assert submit(server, team)["volumes"] == []  # no --model-cache
    server.plane.model_cache = "models"  # named, not declared (yet)
    created = submit(server, team)
    assert created["volumes"] == [] and "HF_HOME" not in created["env"]


@pytest.mark.slow
def test_the_jobs_own_mount_and_variable_win(server: Server, team: str) -> None:
    server.plane.model_cache = "models"
    declare(server, "models")
    declare(server, "mine")
    own = [{"name": "mine", "path": "/root/.cache", "read_only": False}]
    created = submit(server, team, volumes=own)  # over the cache path: its own, alone
    assert created["volumes"] == own and "HF_HOME" not in created["env"]
    created = submit(server, team, env={"HF_HOME": "/weights"})
    assert created["env"]["HF_HOME"] == "/weights"
    assert [v["name"] for v in created["volumes"]] == ["models"]


@pytest.mark.slow
def test_a_cache_the_job_may_not_mount_is_left_out(server: Server, team: str) -> None:
    server.plane.model_cache = "models"
    declare(server, "models", tenants=["other"])
    assert submit(server, team)["volumes"] == []  # accepted, without the cache
    queue(server, "gpu", "team", [])
    server.client.put(
        "/v1/volumes/models", json={"path": "/srv/m", "queues": ["gpu"]}, headers=server.admin
    ).raise_for_status()
    assert submit(server, team)["volumes"] == []  # the default queue may not mount it
    assert [v["name"] for v in submit(server, team, queue="gpu")["volumes"]] == ["models"]


@pytest.mark.slow
def test_a_read_only_cache_is_mounted_read_only(server: Server, team: str) -> None:
    """A store the operator filled beforehand: jobs read it, none writes it."""
    server.plane.model_cache = "models"
    declare(server, "models", read_only=True)
    assert submit(server, team)["volumes"] == [{"name": "models", "path": CACHE, "read_only": True}]
