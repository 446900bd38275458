"""Volumes (``/v1/volumes``): the admin declares them, a job mounts them by name; every refusal
names the field and stores nothing. Who may mount what is checked at submission and again when
the replica is handed out."""

from __future__ import annotations

from typing import Any

import pytest
from server_kit import BOTH_STORES, Server, node, queue, tenant

from xpupool.server.services import volumes

STORES = BOTH_STORES  # its tests' server on SQLite and on PostgreSQL (conftest.py)


def declare(srv: Server, name: str, **body: Any) -> Any:
    return srv.client.put(f"/v1/volumes/{name}", json={"path": "/srv/x", **body}, headers=srv.admin)


def submit(srv: Server, token: str, mounts: list[dict[str, Any]], **body: Any) -> Any:
    job = {"command": ["true"], "volumes": mounts, **body}
    return srv.client.post("/v1/jobs", json=job, headers=srv.as_(token))


def test_the_admin_declares_lists_and_deletes(server: Server) -> None:
    lab = tenant(server, "lab")
    other = tenant(server, "other")
    r = declare(server, "datasets", read_only=True)
    assert r.status_code == 201, r.text
    assert r.json()["read_only"] is True and r.json()["tenants"] is None
    assert declare(server, "datasets", read_only=False).status_code == 200
    r = declare(server, "private", tenants=["lab"], per_tenant=True)
    assert r.status_code == 201
    assert declare(server, "x", path="/srv/{node}/x").status_code == 201
    listed = server.client.get("/v1/volumes", headers=server.admin).json()
    assert [v["name"] for v in listed] == ["datasets", "private", "x"]
    mine = server.client.get("/v1/volumes", headers=server.as_(other)).json()
    assert [v["name"] for v in mine] == ["datasets", "x"]  # not lab's private one
    assert len(server.client.get("/v1/volumes", headers=server.as_(lab)).json()) == 3
    denied = server.client.put("/v1/volumes/y", json={"path": "/y"}, headers=server.as_(lab))
    assert denied.status_code == 403
    gone = server.client.delete("/v1/volumes/x", headers=server.admin)
    assert gone.status_code == 204
    again = server.client.delete("/v1/volumes/x", headers=server.admin)
    assert again.status_code == 404


@pytest.mark.parametrize(
    ("path", "why"),
    [("srv/x", "absolute"), ("/srv/../etc", "'.' or '..'"), ("/", "'/'"), ("/srv//x", "plainly")],
)
def test_a_bad_volume_path_is_refused_naming_the_field(server: Server, path: str, why: str) -> None:
    r = declare(server, "v", path=path)
    assert r.status_code == 422 and r.json()["field"] == "path" and why in r.json()["reason"]
    assert server.client.get("/v1/volumes", headers=server.admin).json() == []


def test_a_job_mounts_only_what_it_may(server: Server) -> None:
    lab = tenant(server, "lab")
    tenant(server, "other")
    queue(server, "gpu", "lab", [])
    declare(server, "shared")
    declare(server, "ro", read_only=True)
    declare(server, "others", tenants=["other"])
    declare(server, "gpuonly", queues=["gpu"])
    cases: list[tuple[list[dict[str, Any]], str, str]] = [
        ([{"name": "missing", "path": "/data"}], "volumes[0].name", "no volume"),
        ([{"name": "others", "path": "/data"}], "volumes[0].name", "no volume"),
        ([{"name": "gpuonly", "path": "/data"}], "volumes[0].name", "queue 'lab'"),
        ([{"name": "ro", "path": "/data"}], "volumes[0].read_only", "read-only"),
        ([{"name": "shared", "path": "/proc/x"}], "volumes[0].path", "/proc"),
        ([{"name": "shared", "path": "data"}], "volumes[0].path", "absolute"),
        ([{"name": "shared", "path": "/data/../etc"}], "volumes[0].path", "'..'"),
        (
            [
                {"name": "shared", "path": "/data"},
                {"name": "ro", "path": "/data/in", "read_only": True},
            ],
            "volumes[1].path",
            "overlaps",
        ),
    ]
    for mounts, field, why in cases:
        r = submit(server, lab, mounts)
        assert r.status_code == 422, (mounts, r.text)
        assert r.json()["field"] == field and why in r.json()["reason"], (mounts, r.json())
    assert server.client.get("/v1/jobs", headers=server.as_(lab)).json() == []
    ok = submit(
        server,
        lab,
        [{"name": "shared", "path": "/data"}, {"name": "ro", "path": "/ref", "read_only": True}],
    )
    assert ok.status_code == 201, ok.text
    assert ok.json()["volumes"] == [
        {"name": "shared", "path": "/data", "read_only": False},
        {"name": "ro", "path": "/ref", "read_only": True},
    ]
    in_gpu = submit(server, lab, [{"name": "gpuonly", "path": "/g"}], queue="gpu")
    assert in_gpu.status_code == 201, in_gpu.text


def test_the_node_gets_the_path_resolved_and_nothing_it_may_no_longer_mount(
    server: Server,
) -> None:
    tenant(server, "lab")
    declare(server, "scratch", path="/srv/{node}/scratch", per_tenant=True)
    declare(server, "narrowed", tenants=["lab"])
    mounts = [
        {"name": "scratch", "path": "/scratch", "read_only": False},
        {"name": "narrowed", "path": "/n", "read_only": True},
        {"name": "deleted", "path": "/d", "read_only": False},
    ]
    with server.plane.db.connect() as conn:
        given = volumes.grants(conn, "lab", "lab", "gpu-7", mounts)
        assert [(g.name, g.host_path, g.per_tenant, g.read_only) for g in given] == [
            ("scratch", "/srv/gpu-7/scratch", True, False),
            ("narrowed", "/srv/x", False, True),
        ]
    declare(server, "narrowed", tenants=["other"])
    with server.plane.db.connect() as conn:
        assert [g.name for g in volumes.grants(conn, "lab", "lab", "n", mounts)] == ["scratch"]


def beat(srv: Server, node_name: str, volumes: object) -> Any:
    body = {"node": node_name, "volumes": volumes}
    return srv.client.post("/v1/agent/heartbeat", json=body, headers=srv.admin)


def test_usage_the_agents_measure_is_shown_and_over_quota_named(server: Server) -> None:
    lab = tenant(server, "lab")
    other = tenant(server, "other")
    node(server, "n1")
    node(server, "n2")
    gib = 1 << 30
    declare(server, "scratch", path="/srv/{node}/s", per_tenant=True, quota_bytes=3 * gib)
    declare(server, "shared", path="/nfs/shared", quota_bytes=10 * gib)
    r = beat(
        server,
        "n1",
        [
            {"name": "scratch", "tenant": "lab", "bytes": 2 * gib},
            {"name": "scratch", "tenant": "other", "bytes": gib},
            {"name": "shared", "bytes": 4 * gib},
        ],
    )
    assert r.status_code == 200, r.text
    beat(
        server,
        "n2",
        [
            {"name": "scratch", "tenant": "lab", "bytes": 2 * gib, "complete": False},
            {"name": "shared", "bytes": 5 * gib},
        ],
    )
    vols = {v["name"]: v for v in server.client.get("/v1/volumes", headers=server.admin).json()}
    assert vols["scratch"]["used_bytes"] == 5 * gib  # one directory per node: they add up
    assert vols["scratch"]["over_quota"] == ["lab"]  # 4 GiB over its 3 GiB
    assert vols["shared"]["used_bytes"] == 5 * gib  # one path everywhere: the largest measure
    assert vols["shared"]["over_quota"] == []
    mine = {
        v["name"]: v for v in server.client.get("/v1/volumes", headers=server.as_(other)).json()
    }
    assert [u["tenant"] for u in mine["scratch"]["usage"]] == ["other"]  # its own only
    assert mine["scratch"]["used_bytes"] == gib
    assert [
        u["tenant"]
        for u in server.client.get("/v1/volumes", headers=server.as_(lab)).json()[0]["usage"]
    ] == ["lab", "lab"]


def test_a_bad_usage_report_is_refused_and_changes_nothing(server: Server) -> None:
    node(server, "n1")
    declare(server, "shared")
    assert beat(server, "n1", [{"name": "shared", "bytes": 7}]).status_code == 200
    for bad in (
        [{"name": "shared", "bytes": -1}],
        [{"name": "Not A Name", "bytes": 1}],
        [{"name": "shared", "bytes": 1}] * 65,
    ):
        r = beat(server, "n1", bad)
        assert r.status_code == 422, (bad, r.text)
        assert r.json()["field"].startswith("volumes"), r.json()
    (shared,) = server.client.get("/v1/volumes", headers=server.admin).json()
    assert shared["used_bytes"] == 7
    assert beat(server, "n1", None).status_code == 200  # not measured this time: kept
    assert server.client.get("/v1/volumes", headers=server.admin).json()[0]["used_bytes"] == 7
