"""Model jobs at the server (in-process plane): a plan that needs more than one node becomes a
multi-replica gang job, one replica per pipeline stage, with pp filled into the command; the
replicas get the distributed environment like any multi-replica job (docs/jobs.md)."""

from __future__ import annotations

import pytest
from server_kit import Server, job, node, node_body, tenant


@pytest.mark.slow
def test_multi_node_plan_submits_a_gang_of_pipeline_stages(server: Server) -> None:
    # one 80 GB card per node: qwen2.5-72b in bf16 (~68 GiB of weights) needs two stages
    node(server, "s1", count=1, runtime="docker")
    node(server, "s2", count=1, runtime="docker")
    token = tenant(server, "a")
    body = {"model": {"name": "qwen2.5-72b", "precision": "bf16", "context": 4096}}
    r = server.client.post("/v1/jobs", json=body, headers=server.as_(token))
    assert r.status_code == 201, r.text
    created = r.json()
    assert created["request"]["replicas"] == 2 and created["request"]["gang"] is True
    assert created["request"]["devices"]["count"] == 1
    argv = created["command"]
    assert argv[argv.index("--pipeline-parallel-size") + 1] == "2"
    assert argv[argv.index("--tensor-parallel-size") + 1] == "1"
    # the runtime's own port, published on a node port (issue 47: a served model is reachable)
    assert created["port"] == int(argv[argv.index("--port") + 1]) == 8000
    server.schedule()
    placed = job(server, created["id"], token)
    assert placed["state"] in ("scheduled", "running"), placed
    assert sorted(a["node"] for a in placed["assignments"]) == ["s1", "s2"]


@pytest.mark.slow
def test_one_node_too_few_is_refused_naming_the_model(server: Server) -> None:
    node(server, "s1", count=1, runtime="docker")
    token = tenant(server, "a")
    body = {"model": {"name": "qwen2.5-72b", "precision": "bf16", "context": 4096}}
    r = server.client.post("/v1/jobs", json=body, headers=server.as_(token))
    assert r.status_code == 422, r.text
    assert r.json()["field"] == "model.name"


@pytest.mark.slow
def test_no_runtime_anywhere_is_named_as_the_reason(server: Server) -> None:
    """The cards could serve the model; no node can run its image. The refusal says that, not
    "no card type of the pool can serve" (issue 42)."""
    node(server, "s1", count=8)  # A100s, no container runtime
    token = tenant(server, "a")
    body = {"model": {"name": "qwen2.5-7b"}}
    r = server.client.post("/v1/jobs", json=body, headers=server.as_(token))
    assert r.status_code == 422, r.text
    assert r.json()["field"] == "model.name"
    assert "container runtime" in r.json()["reason"], r.json()
    assert "no card type of the pool can serve" not in r.json()["reason"]


@pytest.mark.slow
def test_the_stricter_of_the_image_and_runtime_software_needs_is_kept(server: Server) -> None:
    """The runtime catalog asks cuda>=12.4 of the serving image, the image catalog knows the
    image needs cuda>=12.4.1: both hold, so the job keeps both (issue 42: the image's need was
    dropped for the catalog's, weaker one)."""
    node(server, "s1", count=8, runtime="docker")
    token = tenant(server, "a")
    body = {"model": {"name": "qwen2.5-7b"}}
    r = server.client.post("/v1/jobs", json=body, headers=server.as_(token))
    assert r.status_code == 201, r.text
    created = r.json()
    implied = [e for e in created.get("events", []) if "implied by image" in str(e)]
    software = created["request"]["devices"]["software"]
    print(created["image"], software, implied)
    assert "cuda>=12.4.1" in software, (created["image"], software)


@pytest.mark.slow
def test_plan_fits_uses_the_submission_verdict(server: Server) -> None:
    """An L20 node whose driver 535 cannot run the serving runtime's CUDA: the plan's fits column
    says no, with the driver as the reason, as a submission would (issue 42: "fits yes")."""
    body = node_body("old-l20", count=2, model="NVIDIA L20", memory_mib=46068, runtime="docker")
    for dev in body["devices"]:
        dev["driver_version"] = "535.104.05"
        dev["runtimes"] = {"cuda": "12.2"}
    r = server.client.post("/v1/agent/register", json=body, headers=server.admin)
    assert r.status_code == 200, r.text
    r = server.client.post("/v1/plan", json={"name": "qwen2.5-7b"}, headers=server.admin)
    assert r.status_code == 200, r.text
    rows = [row for row in r.json() if row["device_model"] == "L20"]
    assert rows and rows[0]["in_pool"] == 2, r.json()
    assert rows[0]["fits_now"] is False, rows[0]
    assert "too old" in rows[0]["reason"], rows[0]
