"""The request edge against a real ``xpupool up``: one model for the JSON object and the compact
string, whole in the OpenAPI document, and names checked against the catalog and the pool once at
submission (a refused job stores nothing, in memory or in the SQLite file)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from server_proc import CLUSTER_MIXED, ServerProc


def _stored_jobs(data: Path) -> int:
    with sqlite3.connect(f"file:{data / 'state.db'}?mode=ro", uri=True) as db:
        return int(db.execute("SELECT count(*) FROM jobs").fetchone()[0])


class Pool:
    def __init__(self, srv: ServerProc) -> None:
        self.srv = srv
        self.admin = httpx.Client(base_url=srv.url, headers=srv.headers(), timeout=60)
        assert self.admin.post("/v1/tenants", json={"name": "lab"}).status_code == 201
        token = self.admin.post("/v1/tenants/lab/tokens", json={}).json()["token"]
        self.user = httpx.Client(base_url=srv.url, headers=srv.headers(token), timeout=60)

    def state(self) -> tuple[int, int]:
        """(jobs on disk, jobs pending in the tenant's queue in memory)."""
        pending = self.admin.get("/v1/queues/lab").json()["pending"]
        return _stored_jobs(self.srv.data), int(pending)

    def close(self) -> None:
        self.user.close()
        self.admin.close()


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pool]:
    with ServerProc(tmp_path_factory.mktemp("edge") / "data", cluster=CLUSTER_MIXED) as srv:
        p = Pool(srv)
        yield p
        p.close()


def _schema(doc: dict[str, Any], ref: str) -> dict[str, Any]:
    schema: dict[str, Any] = doc["components"]["schemas"][ref.rsplit("/", 1)[-1]]
    return schema


def test_openapi_shows_the_whole_request(pool: Pool) -> None:
    doc = httpx.get(f"{pool.srv.url}/openapi.json", timeout=30).json()
    job_in = (
        doc["components"]["schemas"].get("JobIn") or doc["components"]["schemas"]["JobIn-Input"]
    )
    forms = job_in["properties"]["request"]["anyOf"]
    refs = [f["$ref"] for f in forms if "$ref" in f]
    assert len(refs) == 1 and {"type": "string", "maxLength": 2000} in forms
    request = _schema(doc, refs[0])
    assert request.get("additionalProperties") is False
    assert {"cpu", "memory", "devices", "replicas", "gang", "priority", "node_policy"} <= set(
        request["properties"]
    )
    replicas = request["properties"]["replicas"]["anyOf"][0]
    assert (replicas["type"], replicas["minimum"]) == ("integer", 1)
    devices_ref = next(f["$ref"] for f in request["properties"]["devices"]["anyOf"] if "$ref" in f)
    devices = _schema(doc, devices_ref)
    assert devices.get("additionalProperties") is False
    fields = {"count", "models", "exclude_models", "memory", "cores", "card_memory", "software"}
    assert fields <= set(devices["properties"])
    count = devices["properties"]["count"]["anyOf"][0]
    assert (count["minimum"], count["maximum"]) == (0, 64)
    assert devices["properties"]["models"]["description"]


@pytest.mark.parametrize(
    "form",
    [
        {"request": "A100:2 mem=20Gi replicas=2"},
        {"request": {"devices": {"count": 2, "models": ["A100"], "memory": "20Gi"}, "replicas": 2}},
        {"spec": "A100:2 mem=20Gi replicas=2"},
    ],
)
def test_every_form_is_stored_as_one_canonical_request(pool: Pool, form: dict[str, Any]) -> None:
    r = pool.user.post("/v1/jobs", json={"command": ["true"], **form})
    assert r.status_code == 201, r.text
    job = r.json()
    assert job["request"] == {
        "name": job["name"],
        "devices": {"count": 2, "models": ["A100"], "memory": "20Gi"},
        "replicas": 2,
        "queue": "lab",
    }
    assert pool.user.post(f"/v1/jobs/{r.json()['id']}/cancel").status_code == 200


@pytest.mark.parametrize(
    ("body", "field", "reason"),
    [
        ({"request": {"devices": {"models": ["A1OO"]}}}, "request.devices.models[0]", "catalog"),
        ({"request": "A100,H1000:2"}, "request.devices.models[1]", "did you mean"),
        ({"spec": "any:!T44"}, "spec.devices.exclude_models[0]", "catalog"),
        ({"request": {"devices": {"uuids": ["GPU-nowhere"]}}}, "request.devices.uuids[0]", "UUID"),
        ({"request": "any policy=fastest"}, "request.node_policy", "unknown policy"),
        ({"request": "A100 mem=24Gx"}, "request.devices.memory", "unit"),
        ({"request": {"devices": {"count": 65}}}, "request.devices.count", "64"),
        ({"request": {"devices": {"count": 0, "cores": "50%"}}}, "request.devices.count", "count"),
        ({"request": "A100 " + "x" * 2000}, "request", "longer than 2000"),
    ],
)
def test_a_bad_request_names_the_field_and_stores_nothing(
    pool: Pool, body: dict[str, Any], field: str, reason: str
) -> None:
    before = pool.state()
    r = pool.user.post("/v1/jobs", json={"command": ["true"], **body})
    assert r.status_code == 422, r.text
    assert r.json()["field"] == field
    assert reason in r.json()["reason"]
    assert pool.state() == before


def test_names_the_pool_knows_beyond_the_catalog_are_accepted(pool: Pool) -> None:
    """A UUID of a registered device; a catalog model no node has yet is refused as nothing in
    the pool can hold it, unless the queue keeps such jobs for a pool that grows."""
    uuid = pool.admin.get("/v1/devices").json()[0]["uuid"]
    absent = {"devices": {"models": ["MI300X"]}}
    r = pool.user.post("/v1/jobs", json={"command": ["true"], "request": absent})
    assert r.status_code == 422 and r.json()["field"] == "request.devices.models"
    assert "no MI300X card in the pool" in r.json()["reason"]
    grows = {"name": "lab", "tenant": "lab", "allow_unfittable": True}
    assert pool.admin.put("/v1/queues/lab", json=grows).status_code == 200
    try:
        for request in ({"devices": {"uuids": [uuid]}}, absent):
            r = pool.user.post("/v1/jobs", json={"command": ["true"], "request": request})
            assert r.status_code == 201, r.text
            assert pool.user.post(f"/v1/jobs/{r.json()['id']}/cancel").status_code == 200
    finally:
        pool.admin.put("/v1/queues/lab", json={"name": "lab", "tenant": "lab"})


def test_an_unknown_model_points_at_the_accelerator_list(pool: Pool) -> None:
    r = pool.user.post("/v1/jobs", json={"command": ["true"], "request": "A1000"})
    assert r.status_code == 422 and r.json()["field"] == "request.devices.models[0]"
    assert r.json()["reason"].endswith("see `xpupool accelerators`")


def test_accelerators_list_the_catalog_and_count_the_pool(pool: Pool) -> None:
    """Any tenant may read it: every catalog model once, with the pool's devices counted."""
    r = pool.user.get("/v1/accelerators")
    assert r.status_code == 200, r.text
    rows = r.json()
    devices = pool.admin.get("/v1/devices").json()
    assert sum(row["in_pool"] for row in rows) == len(devices)
    by_model = {row["model"]: row for row in rows}
    a100 = by_model["A100-SXM4-80GB"]
    assert (a100["vendor"], a100["family"], a100["memory_gib"]) == ("nvidia", "A100", 80)
    assert a100["in_catalog"] and a100["in_pool"] == sum(
        d["canonical_model"] == "A100-SXM4-80GB" for d in devices
    )
    assert a100["in_pool"] > 0
    assert by_model["MI300X"]["in_pool"] == 0  # in the catalog, not in this pool
