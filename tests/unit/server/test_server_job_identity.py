"""What the server tells an agent about whose work it runs (the tenant and its stable index, which
a root agent turns into the job's uid), and what the agent tells it back (which limits applied,
why a replica died)."""

from __future__ import annotations

from typing import Any

import pytest
from server_kit import FakeClock, Server, heartbeat, job, node, open_server, report, submit, tenant
from sqlalchemy import update

from xpupool.server.storage.tenants import tenants as t_tenants


def _placed(server: Server, token: str, spec: str = "A100:1") -> tuple[int, dict[str, Any]]:
    j = submit(server, token, spec)
    assert server.schedule() == 1, job(server, j["id"])["reason"]
    (work,) = [w for w in heartbeat(server, "n1")["run"] if w["job_id"] == j["id"]]
    return j["id"], work


@pytest.mark.slow
def test_work_carries_the_tenant_and_a_stable_index_per_tenant(server: Server) -> None:
    node(server, "n1", count=4)
    a, b = tenant(server, "a"), tenant(server, "b")
    _, wa = _placed(server, a)
    _, wb = _placed(server, b)
    _, wa2 = _placed(server, a)
    assert (wa["tenant"], wb["tenant"]) == ("a", "b")
    assert wa["tenant_index"] != wb["tenant_index"]
    assert wa2["tenant_index"] == wa["tenant_index"]


@pytest.mark.slow
def test_indices_survive_a_restart_and_old_rows_get_one(server: Server, clock: FakeClock) -> None:
    tenant(server, "a")
    tenant(server, "b")
    before = dict(server.plane.tenant_index)
    with server.plane.db.begin() as conn:  # a database from before the column: b has none
        conn.execute(update(t_tenants).where(t_tenants.c.name == "b").values(uid_index=None))
    server.plane.db.dispose()
    plane, _ = open_server(server.data, clock)
    try:
        assert plane.tenant_index["a"] == before["a"]
        assert plane.tenant_index["b"] not in (None, before["a"])
        assert len(set(plane.tenant_index.values())) == len(plane.tenant_index)
    finally:
        plane.db.dispose()


@pytest.mark.slow
def test_the_limits_a_replica_runs_under_become_one_event(server: Server) -> None:
    node(server, "n1", count=1)
    a = tenant(server, "a")
    job_id, _ = _placed(server, a)
    running = {**report(job_id, 0, "running"), "limits": "limits: cgroup v1 memory=512Mi cpu=500m"}
    heartbeat(server, "n1", [running])
    heartbeat(server, "n1", [running])  # reported again: not recorded again
    events = [e["reason"] for e in job(server, job_id)["events"]]
    assert events.count("replica 0: limits: cgroup v1 memory=512Mi cpu=500m") == 1


@pytest.mark.slow
def test_a_replica_killed_for_memory_says_so_in_the_jobs_reason(server: Server) -> None:
    node(server, "n1", count=1)
    a = tenant(server, "a")
    job_id, _ = _placed(server, a)
    heartbeat(server, "n1", [report(job_id, 0, "running")])
    oom = "killed by SIGKILL: out of memory (over its memory=128Mi limit)"
    heartbeat(server, "n1", [{**report(job_id, 0, "failed", 137), "reason": oom}])
    j = job(server, job_id)
    assert j["state"] == "failed"
    assert j["reason"] == f"replica 0 exited with 137: {oom}"


@pytest.mark.slow
def test_a_replica_that_never_started_names_the_step_and_has_no_exit_code(
    server: Server,
) -> None:
    """Issue 42: its supervisor could not write its status; the job said "replica 0 exited with
    0" with exit code 0, and "started on n1 (pid None)", though nothing of it had run."""
    node(server, "n1", count=1)
    a = tenant(server, "a")
    job_id, _ = _placed(server, a)
    why = "supervisor: cannot write /x/status.json: No such file or directory"
    heartbeat(server, "n1", [{**report(job_id, 0, "failed"), "reason": why}])
    j = job(server, job_id)
    assert j["state"] == "failed"
    assert j["exit_code"] is None
    assert j["reason"] == f"replica 0: {why}"
    assert not any("pid None" in e["reason"] for e in j["events"]), j["events"]
