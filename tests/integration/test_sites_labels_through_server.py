"""Sites and labels through a real ``xpupool up`` (issue 21, part 3): two nodes in two sites with
labels, requests that name a site, avoid one, prefer one or select a label, in both request forms;
misspelt sites and labels no node has are refused at submission and store nothing."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from server_proc import ServerProc
from test_request_edge import Pool as EdgePool
from test_request_edge import _stored_jobs

CLUSTER = """
nodes:
  - name: bj-0
    site: beijing
    labels: {pool: a}
    cpu: 64
    memory: 256Gi
    devices:
      - {vendor: nvidia, model: NVIDIA A100-SXM4-80GB, count: 4, memory: 80Gi, driver: 550.54.15}
  - name: sh-0
    site: shanghai
    labels: {pool: b}
    cpu: 64
    memory: 256Gi
    devices:
      - {vendor: nvidia, model: NVIDIA A100-SXM4-80GB, count: 4, memory: 80Gi, driver: 550.54.15}
"""


class Pool(EdgePool):
    """The request-edge tests' pool (an admin and a tenant 'lab'), with submit and placement."""

    def submit(self, form: dict[str, Any]) -> httpx.Response:
        return self.user.post("/v1/jobs", json={"command": ["true"], **form})

    def placed_on(self, job_id: int) -> str:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            job = self.user.get(f"/v1/jobs/{job_id}").json()
            if job["assignments"]:
                return str(job["assignments"][0]["node"])
            time.sleep(0.1)
        raise AssertionError(f"job {job_id} was not placed: {job}")

    def stored_jobs(self) -> int:
        return _stored_jobs(self.srv.data)


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pool]:
    root: Path = tmp_path_factory.mktemp("sites")
    cluster = root / "cluster.yaml"
    cluster.write_text(CLUSTER)
    with ServerProc(root / "data", cluster=cluster) as srv:
        p = Pool(srv)
        yield p
        p.close()


@pytest.mark.parametrize(
    ("form", "node"),
    [
        ({"request": "A100 mem=1Gi site=shanghai"}, "sh-0"),
        ({"request": {"devices": {"memory": "1Gi"}, "site": "beijing"}}, "bj-0"),
        ({"request": "A100 mem=1Gi site=!beijing"}, "sh-0"),
        ({"request": "A100 mem=1Gi label=pool=a"}, "bj-0"),
        ({"request": {"devices": {"memory": "1Gi"}, "node_selector": {"pool": "b"}}}, "sh-0"),
        ({"request": "A100 mem=1Gi prefer-site=shanghai"}, "sh-0"),
        ({"spec": "A100 mem=1Gi prefer-site=beijing"}, "bj-0"),
    ],
)
def test_the_job_runs_where_it_asks(pool: Pool, form: dict[str, Any], node: str) -> None:
    r = pool.submit(form)
    assert r.status_code == 201, r.text
    assert pool.placed_on(r.json()["id"]) == node
    assert pool.user.post(f"/v1/jobs/{r.json()['id']}/cancel").status_code == 200


def test_the_stored_request_keeps_sites_and_labels(pool: Pool) -> None:
    r = pool.submit({"request": "A100 mem=1Gi site=beijing,!shanghai label=pool=a"})
    assert r.status_code == 201, r.text
    assert r.json()["request"]["site"] == ["beijing", "!shanghai"]
    assert r.json()["request"]["node_selector"] == {"pool": "a"}
    assert pool.user.post(f"/v1/jobs/{r.json()['id']}/cancel").status_code == 200


@pytest.mark.parametrize(
    ("request_form", "field", "words"),
    [
        ("A100 site=shangai", "request.site", "did you mean 'shanghai'"),
        ("A100 site=!shangai", "request.site", "sites: beijing, shanghai"),
        ("A100 prefer-site=bejing", "request.preferred_site", "did you mean 'beijing'"),
        ("A100 label=pool=c", "request.node_selector.pool", "no node has label pool=c"),
        ("A100:4 site=beijing label=pool=b", "request.node_selector", "no node has all of"),
        ("A100:8 site=beijing", "request.devices.count", "no node has more than 4"),
    ],
)
def test_a_place_nothing_matches_is_refused_and_stores_nothing(
    pool: Pool, request_form: str, field: str, words: str
) -> None:
    before = pool.stored_jobs()
    r = pool.submit({"request": request_form})
    assert r.status_code == 422, r.text
    assert r.json()["field"] == field and words in r.json()["reason"], r.json()
    assert pool.stored_jobs() == before
