"""Model jobs at the server (in-process plane): a plan that needs more than one node becomes a
multi-replica gang job, one replica per pipeline stage, with pp filled into the command; the
replicas get the distributed environment like any multi-replica job (docs/jobs.md)."""

from __future__ import annotations

from server_kit import Server, job, node, tenant


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
    server.schedule()
    placed = job(server, created["id"], token)
    assert placed["state"] in ("scheduled", "running"), placed
    assert sorted(a["node"] for a in placed["assignments"]) == ["s1", "s2"]


def test_one_node_too_few_is_refused_naming_the_model(server: Server) -> None:
    node(server, "s1", count=1, runtime="docker")
    token = tenant(server, "a")
    body = {"model": {"name": "qwen2.5-72b", "precision": "bf16", "context": 4096}}
    r = server.client.post("/v1/jobs", json=body, headers=server.as_(token))
    assert r.status_code == 422, r.text
    assert r.json()["field"] == "model.name"
