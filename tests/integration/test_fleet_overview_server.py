"""The fleet overview and history through a real ``xpupool up`` on 127.0.0.1 (issue 23, the data
half): the two-site example pool, jobs of two tenants, the overview's numbers against what
``/v1/devices``, ``/v1/jobs`` and ``/v1/sites`` say, history samples written by the server's own
watch thread (``--history-interval 1s``) and read back per site and model, the same series in
``/metrics``, and bad queries answered 400 naming the field."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from server_proc import CLUSTER_MIXED, ServerProc, until


class Pool:
    def __init__(self, srv: ServerProc) -> None:
        self.srv = srv
        self.admin = httpx.Client(base_url=srv.url, headers=srv.headers(), timeout=30)
        self.tokens: dict[str, str] = {}
        for name in ("lab", "other"):
            r = self.admin.post("/v1/tenants", json={"name": name})
            assert r.status_code == 201, r.text
            r = self.admin.post(f"/v1/tenants/{name}/tokens", json={"name": "t"})
            assert r.status_code == 201, r.text
            self.tokens[name] = r.json()["token"]

    def as_(self, tenant: str) -> httpx.Client:
        return httpx.Client(
            base_url=self.srv.url, headers=self.srv.headers(self.tokens[tenant]), timeout=30
        )

    def submit(self, tenant: str, spec: str) -> int:
        r = self.as_(tenant).post("/v1/jobs", json={"spec": spec, "command": ["true"]})
        assert r.status_code == 201, r.text
        return int(r.json()["id"])

    def get(self, path: str, **params: Any) -> Any:
        r = self.admin.get(path, params=params)
        assert r.status_code == 200, r.text
        return r.json()


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pool]:
    root: Path = tmp_path_factory.mktemp("overview")
    with ServerProc(
        root / "data", cluster=CLUSTER_MIXED, extra_args=("--history-interval", "1s")
    ) as srv:
        p = Pool(srv)
        placed = [
            p.submit("lab", "A100:2"),
            p.submit("lab", "L20:1 cores=30%"),
            p.submit("other", "910B:1 mem=16Gi"),
        ]
        p.submit("lab", "H100:8")  # two H100 nodes: each takes one
        p.submit("lab", "H100:8")
        p.submit("lab", "H100:8")  # no third node: waits

        def settled() -> bool:
            states = {j["id"]: j["state"] for j in p.get("/v1/jobs", limit=1000)}
            return (
                all(states[i] == "scheduled" for i in placed)
                and sum(1 for s in states.values() if s == "pending") == 1
            )

        until(settled, "the jobs placed and one pending")
        yield p


def test_overview_numbers_equal_devices_jobs_and_sites(pool: Pool) -> None:
    seen = pool.get("/v1/fleet/overview")
    listed = pool.get("/v1/devices")
    by_group: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for d in listed:
        by_group.setdefault((d["site"], d["canonical_model"] or d["model"]), []).append(d)
    groups = {(g["site"], g["device_model"]): g for g in seen["groups"]}
    assert set(groups) == set(by_group)
    for key, g in groups.items():
        cards = by_group[key]
        assert g["devices_total"] == len(cards)
        assert g["devices_allocated"] == sum(1 for d in cards if d["jobs"])
        assert g["memory_mib_allocated"] == sum(d["allocated_memory_mib"] for d in cards)
        assert g["core_pct_allocated"] == sum(d["allocated_core_permille"] for d in cards) / 10
        assert g["cordoned"] == sum(1 for d in cards if d["cordoned"])
    sites = {s["name"]: s["devices"] for s in pool.get("/v1/sites")}
    for site, count in sites.items():
        assert sum(g["devices_total"] for g in seen["groups"] if g["site"] == site) == count
    jobs = pool.get("/v1/jobs", limit=1000)
    assert seen["jobs"]["pending"] == sum(1 for j in jobs if j["state"] == "pending") == 1
    assert seen["jobs"]["holding"] == sum(1 for j in jobs if j["state"] == "scheduled") == 5
    assert seen["pending_by_reason"] == {"insufficient device memory": 1}


def test_a_tenant_counts_only_its_own_jobs(pool: Pool) -> None:
    other = pool.as_("other").get("/v1/fleet/overview").json()
    assert other["scope"] == "tenant"
    assert other["jobs"] == {"pending": 0, "running": 0, "holding": 1}
    assert other["pending_by_reason"] == {}  # lab's waiting job is not other's to see
    lab = pool.as_("lab").get("/v1/fleet/overview").json()
    assert lab["jobs"]["pending"] == 1 and lab["pending_by_reason"]
    assert other["groups"] == lab["groups"]


def test_history_is_sampled_by_the_server_per_site_model_and_fleet(pool: Pool) -> None:
    def points(**params: str) -> dict[str, list[list[float]]]:
        found = pool.get("/v1/fleet/history", **params)
        return {x["name"]: x["points"] for x in found["series"]}

    until(lambda: len(points().get("devices_total", [])) >= 2, "two fleet history samples")
    fleet = points()
    assert fleet["devices_total"][-1][1] == 112
    assert fleet["pending"][-1][1] == 1
    times = [t for t, _ in fleet["devices_total"]]
    assert times == sorted(times) and times[-1] <= time.time() + 1
    beijing = points(site="beijing")
    assert beijing["devices_total"][-1][1] == 56 and "stranded_memory_mib" in beijing
    a100 = points(site="beijing", model="A100-SXM4-80GB")
    assert a100["devices_allocated"][-1][1] == 2 and "stranded_memory_mib" not in a100
    assert pool.get("/v1/fleet/history", window="1w")["step_s"] == 3600


def test_history_in_metrics(pool: Pool) -> None:
    until(lambda: "xpupool_fleet_devices{" in pool.admin.get("/metrics").text, "history gauges")
    text = pool.admin.get("/metrics").text
    found = {
        (m.name, s.labels["site"], s.labels["model"]): s.value
        for m in text_string_to_metric_families(text)
        if m.name.startswith("xpupool_fleet_")
        for s in m.samples
    }
    assert found[("xpupool_fleet_devices", "", "")] == 112
    assert found[("xpupool_fleet_devices", "shanghai", "")] == 56
    assert found[("xpupool_fleet_pending_jobs", "", "")] == 1


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"window": "1y"}, "window"),
        ({"site": "atlantis"}, "site"),
        ({"site": "beijing", "model": "<script>"}, "model"),
    ],
)
def test_bad_history_query_is_400_naming_the_field(
    pool: Pool, params: dict[str, str], field: str
) -> None:
    r = pool.admin.get("/v1/fleet/history", params=params)
    assert r.status_code == 400, r.text
    assert r.json()["field"] == field


def test_a_card_s_detail(pool: Pool) -> None:
    busy = next(d for d in pool.get("/v1/devices") if d["jobs"])
    detail = pool.get(f"/v1/devices/{busy['uuid']}")
    assert [x["job"] for x in detail["shares"]] == busy["jobs"]
    assert detail["recent"] == []  # cluster-file cards: no agent reports readings
    assert pool.admin.get("/v1/devices/no-such-card").status_code == 404
