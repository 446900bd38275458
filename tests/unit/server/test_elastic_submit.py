"""An elastic job through the API (issue 54 part 1): the range is kept with the job, it is
admitted at its minimum (it grows once running: test_elastic_runs.py), and a bad range is refused
naming the field, storing nothing."""

from __future__ import annotations

import pytest
from server_kit import Server, job, node, row_counts, submit, tenant


@pytest.mark.slow
def test_an_elastic_job_is_kept_with_its_range_and_runs_at_its_minimum(server: Server) -> None:
    node(server, "n1")
    a = tenant(server, "a")
    j = submit(server, a, "A100:1 replicas=2..4")
    assert j["request"]["replicas"] == {"min": 2, "max": 4}
    assert server.schedule() == 1
    got = job(server, j["id"], a)
    assert got["state"] == "scheduled" and len(got["assignments"]) == 2


@pytest.mark.slow
@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"spec": "A100:1 replicas=4..2"}, "spec.replicas.max"),
        ({"request": {"replicas": {"min": 0, "max": 2}}}, "request.replicas.min"),
        ({"spec": "A100:1 replicas=9..2"}, "spec.replicas.max"),
        ({"request": {"replicas": {"min": 2}}}, "request.replicas.max"),
        ({"request": {"replicas": {"min": 2, "max": 10001}}}, "request.replicas.max"),
        ({"request": {"replicas": {"min": 2, "max": 4, "step": 1}}}, "request.replicas.step"),
        ({"request": {"replicas": "2..x"}}, "request.replicas"),
        ({"request": {"replicas": {"min": True, "max": 4}}}, "request.replicas.min"),
    ],
)
def test_a_bad_range_is_refused_naming_the_field(
    server: Server, body: dict[str, object], field: str
) -> None:
    a = tenant(server, "a")
    before = row_counts(server)
    r = server.client.post("/v1/jobs", json={**body, "command": ["true"]}, headers=server.as_(a))
    assert r.status_code == 422, r.text
    assert r.json()["field"] == field
    assert row_counts(server) == before
