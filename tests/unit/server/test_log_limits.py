"""What a tenant's job logs may take on the server (issue 43, item 5): the tenant's limits per job
(``max_job_log_mib``, its replicas together, also sent to the agents) and for all its jobs
(``max_log_mib``), set by the admin, enforced where the agents' uploads are kept."""

from __future__ import annotations

from typing import Any

import pytest
from server_kit import Server, heartbeat, job, node, report, submit, tenant

from xpupool.server.retention import Retention
from xpupool.server.services.job_limits import sweep_finished

KIB = 1 << 10
MIB = 1 << 20


def _upload(
    server: Server, node_name: str, job_id: int, replica: int, body: bytes, **q: Any
) -> None:
    url = f"/v1/agent/nodes/{node_name}/jobs/{job_id}/replicas/{replica}/logs"
    r = server.client.post(url, content=body, params=q, headers=server.admin)
    assert r.status_code == 204, r.text


def _log(server: Server, job_id: int, replica: int = 0) -> bytes:
    return server.plane.log_path(job_id, replica).read_bytes()


def _cut(log: bytes, kept: bytes, limit: str) -> bool:
    """``log`` is ``kept`` then one marker line naming ``limit``, and nothing else."""
    marker = log[len(kept) :]
    return (
        log.startswith(kept)
        and marker.startswith(b"\n[xpupool: log cut")
        and f"({limit})]\n".encode() in marker
        and marker.count(b"\n") == 2
    )


def _limits(server: Server, name: str, **limits: int) -> dict[str, Any]:
    r = server.client.patch(f"/v1/tenants/{name}", json=limits, headers=server.admin)
    assert r.status_code == 200, r.text
    return dict(r.json())


@pytest.mark.slow
def test_one_jobs_log_is_cut_at_its_tenants_limit_over_all_its_replicas(server: Server) -> None:
    node(server, "n1", count=2)
    a = tenant(server, "a")
    assert _limits(server, "a", max_job_log_mib=1)["max_job_log_mib"] == 1
    j = submit(server, a, "A100 replicas=2")["id"]
    server.schedule()
    run = heartbeat(server, "n1")["run"]
    assert sorted(w["log_cap_bytes"] for w in run) == [MIB, MIB]  # the agents cut there too

    _upload(server, "n1", j, 0, b"a" * (700 * KIB))
    _upload(server, "n1", j, 1, b"b" * (700 * KIB))
    _upload(server, "n1", j, 1, b"b" * KIB)  # cut already: dropped
    assert _log(server, j, 0) == b"a" * (700 * KIB)
    assert _cut(_log(server, j, 1), b"b" * (324 * KIB), "max_job_log_mib")
    _upload(server, "n1", j, 0, b"a" * KIB)  # the job is at its limit: replica 0 is cut too
    assert _cut(_log(server, j, 0), b"a" * (700 * KIB), "max_job_log_mib")


@pytest.mark.slow
def test_a_tenants_logs_together_are_capped_until_retention_frees_room(server: Server) -> None:
    node(server, "n1", count=1)
    a = tenant(server, "a")
    b = tenant(server, "b")
    _limits(server, "a", max_log_mib=1)
    first = submit(server, a, "A100")["id"]
    server.schedule()
    heartbeat(server, "n1")
    _upload(server, "n1", first, 0, b"1" * (900 * KIB))
    heartbeat(server, "n1", [report(first, 0, "succeeded", 0)])
    second = submit(server, a, "A100")["id"]
    server.schedule()
    heartbeat(server, "n1")
    _upload(server, "n1", second, 0, b"2" * (200 * KIB))
    assert _cut(_log(server, second), b"2" * (124 * KIB), "max_log_mib")
    seen = {t["name"]: t for t in server.client.get("/v1/tenants", headers=server.admin).json()}
    assert seen["a"]["log_bytes"] >= MIB and seen["a"]["max_log_mib"] == 1
    assert seen["b"]["log_bytes"] == 0  # another tenant's logs are not counted against it
    heartbeat(server, "n1", [report(second, 0, "succeeded", 0)])

    third = submit(server, b, "A100")["id"]  # tenant b is not held back by a's logs
    server.schedule()
    heartbeat(server, "n1")
    _upload(server, "n1", third, 0, b"3" * (900 * KIB))
    assert _log(server, third) == b"3" * (900 * KIB)
    heartbeat(server, "n1", [report(third, 0, "succeeded", 0)])

    server.clock.advance(10)
    assert sweep_finished(server.plane, Retention(seconds=None, jobs=1)) == [first]
    seen = {t["name"]: t for t in server.client.get("/v1/tenants", headers=server.admin).json()}
    assert seen["a"]["log_bytes"] < 200 * KIB
    fourth = submit(server, a, "A100")["id"]
    server.schedule()
    heartbeat(server, "n1")
    _upload(server, "n1", fourth, 0, b"4" * (500 * KIB))
    assert _log(server, fourth) == b"4" * (500 * KIB)
    assert job(server, fourth)["state"] in ("scheduled", "running")


@pytest.mark.slow
def test_log_limits_are_checked_and_a_refusal_changes_nothing(server: Server) -> None:
    tenant(server, "a")
    for body, field in (
        ({"max_job_log_mib": 0}, "max_job_log_mib"),
        ({"max_log_mib": -1}, "max_log_mib"),
        ({"max_job_log_mib": None}, "body"),
    ):
        r = server.client.patch("/v1/tenants/a", json=body, headers=server.admin)
        assert r.status_code == 422, r.text
        assert r.json()["field"].startswith(field), r.json()
    r = server.client.post(
        "/v1/tenants",
        json={"name": "c", "max_log_mib": 0, "max_job_log_mib": 2},
        headers=server.admin,
    )
    assert r.status_code == 201, r.text
    seen = {t["name"]: t for t in server.client.get("/v1/tenants", headers=server.admin).json()}
    assert (seen["a"]["max_job_log_mib"], seen["a"]["max_log_mib"]) == (64, 4096)
    assert (seen["c"]["max_job_log_mib"], seen["c"]["max_log_mib"]) == (2, 0)


@pytest.mark.slow
def test_a_resend_after_an_agent_restart_adds_nothing_around_a_cut(server: Server) -> None:
    node(server, "n1", count=1)
    a = tenant(server, "a")
    _limits(server, "a", max_job_log_mib=1)
    j = submit(server, a, "A100")["id"]
    server.schedule()
    heartbeat(server, "n1")
    _upload(server, "n1", j, 0, b"x" * (600 * KIB), offset=0, attempt=1)
    _upload(server, "n1", j, 0, b"x" * (600 * KIB), offset=0, attempt=1)  # sent again
    _upload(server, "n1", j, 0, b"y" * (600 * KIB), offset=600 * KIB, attempt=1)
    assert _cut(_log(server, j), b"x" * (600 * KIB) + b"y" * (424 * KIB), "max_job_log_mib")
