"""Node taints through the control plane (issue 42, part 3), in process: an agent registers with
taints (taken when the node is new, as kubelet's --register-with-taints), the admin changes them
as kubectl taint does (all or nothing, audited, stored, kept across a restart and a registration),
the listing shows them, jobs that do not tolerate a NoSchedule taint wait naming it and start
when it goes, tolerating jobs land there, and CPU-only jobs take CPU-only nodes first."""

from __future__ import annotations

from typing import Any

import pytest
from server_kit import Server, job, node_body, reopen, row_counts, submit, tenant
from sqlalchemy import select, update

from xpupool.server.storage.fleet import nodes as t_nodes

GPU_TAINT = {"key": "gpu", "value": "true", "effect": "NoSchedule"}


def register(srv: Server, name: str, count: int = 2, **extra: Any) -> dict[str, Any]:
    r = srv.client.post(
        "/v1/agent/register", json={**node_body(name, count=count), **extra}, headers=srv.admin
    )
    assert r.status_code == 200, r.text
    return dict(r.json())


def taint(srv: Server, name: str, token: str | None = None, **body: Any) -> Any:
    return srv.client.post(
        f"/v1/nodes/{name}/taints", json=body, headers=srv.as_(token or srv.admin_token)
    )


def listed(srv: Server) -> dict[str, list[dict[str, str]]]:
    r = srv.client.get("/v1/nodes", headers=srv.admin)
    assert r.status_code == 200, r.text
    return {n["name"]: n["taints"] for n in r.json()}


def placed_on(srv: Server, job_id: int) -> str | None:
    found = job(srv, job_id)["assignments"]
    return str(found[0]["node"]) if found else None


@pytest.mark.slow
def test_a_node_registers_with_taints_and_the_listing_shows_them(server: Server) -> None:
    register(server, "gpu-0", taints=[GPU_TAINT, {"key": "spot", "effect": "PreferNoSchedule"}])
    assert listed(server)["gpu-0"] == [
        GPU_TAINT,
        {"key": "spot", "value": "", "effect": "PreferNoSchedule"},
    ]


def test_a_registration_with_a_bad_taint_is_refused_naming_it(server: Server) -> None:
    before = row_counts(server)
    for taints, field in (
        ([{"key": "gpu", "effect": "NoExecute"}], "taints[0].effect"),
        ([GPU_TAINT, {**GPU_TAINT, "value": "false"}], "taints[1]"),
        ([{"key": "bad key", "effect": "NoSchedule"}], "taints[0].key"),
    ):
        body = {**node_body("gpu-0"), "taints": taints}
        r = server.client.post("/v1/agent/register", json=body, headers=server.admin)
        assert r.status_code == 422 and r.json()["field"] == field, r.text
    assert row_counts(server) == before


@pytest.mark.slow
def test_untolerating_jobs_wait_naming_the_taint_and_start_when_it_goes(server: Server) -> None:
    user = tenant(server, "lab")
    register(server, "gpu-0", count=3, taints=[GPU_TAINT])
    waiting = submit(server, user, spec="A100:1")["id"]
    tolerating = submit(server, user, spec="A100:1 tolerate=gpu=true:NoSchedule")["id"]
    as_json = submit(server, user, request={"devices": {"count": 1}, "tolerations": [
        {"key": "gpu", "operator": "Exists"}]})["id"]  # fmt: skip
    server.schedule()
    assert placed_on(server, tolerating) == "gpu-0"
    assert placed_on(server, as_json) == "gpu-0"
    assert placed_on(server, waiting) is None
    assert "untolerated taint gpu=true:NoSchedule" in job(server, waiting)["reason"]
    r = taint(server, "gpu-0", remove=[{"key": "gpu", "effect": "NoSchedule"}])
    assert r.status_code == 200 and r.json()["taints"] == [], r.text
    server.schedule()
    assert placed_on(server, waiting) == "gpu-0", job(server, waiting)


@pytest.mark.slow
def test_the_admins_change_is_stored_audited_and_kept_across_restart_and_registration(
    server: Server,
) -> None:
    register(server, "gpu-0")
    r = taint(server, "gpu-0", add=[GPU_TAINT, {"key": "spot", "effect": "PreferNoSchedule"}])
    assert r.status_code == 200, r.text
    r = taint(server, "gpu-0", remove=[{"key": "spot"}])  # every effect of the key
    assert r.status_code == 200 and r.json()["taints"] == [GPU_TAINT], r.text
    rows = [e for e in server.plane.audit.entries(None, 100) if e.action == "taint_node"]
    assert [(e.target, e.status) for e in rows] == [
        ("node gpu-0: gpu=true:NoSchedule spot:PreferNoSchedule", 200),
        ("node gpu-0: spot-", 200),
    ]
    # the agent registers again declaring other taints: the node keeps the admin's
    register(server, "gpu-0", taints=[{"key": "other", "effect": "NoSchedule"}])
    assert listed(server)["gpu-0"] == [GPU_TAINT]
    with reopen(server).client as client:
        r = client.get("/v1/nodes", headers=server.admin)
        assert [n["taints"] for n in r.json()] == [[GPU_TAINT]]


@pytest.mark.slow
def test_a_refused_change_changes_nothing(server: Server) -> None:
    user = tenant(server, "lab")
    register(server, "gpu-0", taints=[GPU_TAINT])
    engine = server.plane.engine
    before = row_counts(server), listed(server)
    for body, status, field in (
        ({"add": [{**GPU_TAINT, "value": "false"}]}, 409, None),  # kubectl: --overwrite is false
        ({"remove": [{"key": "gpu", "effect": "PreferNoSchedule"}]}, 422, "remove[0]"),
        ({"add": [GPU_TAINT], "remove": [{"key": "gpu"}]}, 422, "add[0]"),
        ({"add": [{"key": "x", "effect": "NoExecute"}]}, 422, "add[0].effect"),
        ({"add": [{"key": "x"}]}, 422, "add[0].effect"),
        ({"adds": []}, 422, "adds"),
    ):
        r = taint(server, "gpu-0", **body)
        assert r.status_code == status, (body, r.text)
        assert field is None or r.json()["field"] == field, r.text
    assert taint(server, "nope", add=[GPU_TAINT]).status_code == 404
    assert taint(server, "gpu-0", token=user, add=[GPU_TAINT]).status_code == 403
    assert (row_counts(server), listed(server)) == before
    assert server.plane.engine is engine  # not even rebuilt


@pytest.mark.slow
def test_overwrite_replaces_the_value(server: Server) -> None:
    register(server, "gpu-0", taints=[GPU_TAINT])
    r = taint(server, "gpu-0", add=[{**GPU_TAINT, "value": "no"}], overwrite=True)
    assert r.status_code == 200 and r.json()["taints"] == [{**GPU_TAINT, "value": "no"}], r.text


@pytest.mark.slow
def test_a_store_from_before_taints_reads_as_none(server: Server) -> None:
    register(server, "gpu-0")
    with server.plane.db.begin() as conn:
        conn.execute(update(t_nodes).values(taints=None))
    with reopen(server).client as client:
        r = client.get("/v1/nodes", headers=server.admin)
        assert r.status_code == 200 and r.json()[0]["taints"] == []
    with server.plane.db.connect() as conn:
        assert conn.execute(select(t_nodes.c.taints)).scalar_one() is None


@pytest.mark.slow
def test_cpu_only_jobs_take_the_cpu_only_node_first(server: Server) -> None:
    user = tenant(server, "lab")
    register(server, "a100-0", count=8)
    register(server, "cpu-0", count=0)
    ids = [submit(server, user, spec=f"cpu=1 name=c{i}")["id"] for i in range(3)]
    server.schedule()
    assert [placed_on(server, i) for i in ids] == ["cpu-0"] * 3
