"""What only the admin grants, against a real ``xpupool up`` (issue 18, items 4 and 5): the
priority a queue's jobs may ask for, and how much queued work a tenant may hold.

The pool is examples/cluster-mixed.yaml with ``--no-agent``, so placed jobs stay ``scheduled``
and a preempted one is requeued at once. The admin's changes go through the real CLI in a
subprocess. "Nothing stored" is read from the SQLite file itself and from the queue's in-memory
pending count.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from server_proc import CLUSTER_MIXED, ServerProc, until

NEVER_FITS = "cpu=1000"  # no node of the example pool has 1,000 cores: kept pending (see tenant)


def _stored_jobs(data: Path, queue: str) -> int:
    with sqlite3.connect(f"file:{data / 'state.db'}?mode=ro", uri=True) as db:
        return int(db.execute("SELECT count(*) FROM jobs WHERE queue = ?", (queue,)).fetchone()[0])


class Admin:
    """The admin's HTTP client and CLI, and one client per tenant made so far."""

    def __init__(self, srv: ServerProc) -> None:
        self.srv = srv
        self.http = httpx.Client(base_url=srv.url, headers=srv.headers(), timeout=60)
        self.tenants: dict[str, httpx.Client] = {}

    def cli(self, *args: str) -> Any:
        """``xpupool ARGS -o json`` in a subprocess with the admin token; its parsed output."""
        env = {**os.environ, "XPUPOOL_URL": self.srv.url, "XPUPOOL_TOKEN": self.srv.admin_token}
        env.pop("XPUPOOL_CONFIG", None)
        done = subprocess.run(
            [sys.executable, "-c", "from xpupool.cli import main; main()", *args, "-o", "json"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return json.loads(done.stdout)

    def tenant(self, name: str) -> httpx.Client:
        assert self.http.post("/v1/tenants", json={"name": name}).status_code == 201
        # its queue keeps work nothing in the pool can hold (NEVER_FITS), as for a pool that grows
        kept = {"name": name, "tenant": name, "allow_unfittable": True}
        assert self.http.put(f"/v1/queues/{name}", json=kept).status_code == 200
        token = self.http.post(f"/v1/tenants/{name}/tokens", json={}).json()["token"]
        client = httpx.Client(base_url=self.srv.url, headers=self.srv.headers(token), timeout=60)
        self.tenants[name] = client
        return client

    def state(self, queue: str) -> tuple[int, int]:
        """(jobs of ``queue`` on disk, jobs pending in ``queue`` in memory)."""
        pending = int(self.http.get(f"/v1/queues/{queue}").json()["pending"])
        return _stored_jobs(self.srv.data, queue), pending

    def job(self, job_id: int) -> dict[str, Any]:
        return dict(self.http.get(f"/v1/jobs/{job_id}").json())

    def close(self) -> None:
        for c in (self.http, *self.tenants.values()):
            c.close()


@pytest.fixture(scope="module")
def admin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Admin]:
    with ServerProc(tmp_path_factory.mktemp("grants") / "data", cluster=CLUSTER_MIXED) as srv:
        a = Admin(srv)
        yield a
        a.close()


def _submit(c: httpx.Client, spec: str, priority: int | None = None) -> httpx.Response:
    body: dict[str, Any] = {"command": ["sleep", "60"], "spec": spec}
    if priority is not None:
        body["priority"] = priority
    return c.post("/v1/jobs", json=body)


# ------------------------------------------------------------------------ priority
def test_priority_above_the_queue_cap_is_403_and_nothing_is_stored(admin: Admin) -> None:
    mallory = admin.tenant("mallory")
    before = admin.state("mallory")
    for priority in (1, 2147483647):
        r = _submit(mallory, "H100:8", priority)
        assert r.status_code == 403, r.text
        assert r.json()["field"] == "priority"
        assert r.json()["value"] == priority
        assert "mallory" in r.json()["reason"] and "0" in r.json()["reason"]
    r = mallory.post("/v1/jobs", json={"command": ["x"], "spec": "H100:8 priority=7"})
    assert r.status_code == 403, r.text
    assert admin.state("mallory") == before
    assert admin.http.get("/v1/queues/mallory").json()["max_priority"] == 0
    for priority in (0, -5):  # at or below the cap
        assert _submit(mallory, NEVER_FITS, priority).status_code == 201


def test_the_admin_raises_the_cap_and_only_strictly_lower_priority_is_preempted(
    admin: Admin,
) -> None:
    alice, bob = admin.tenant("alice"), admin.tenant("bob")
    queue = admin.cli("queue", "put", "--name", "alice", "--tenant", "alice", "--max-priority", "5")
    assert queue["max_priority"] == 5
    assert _submit(alice, "H100:8", 6).status_code == 403
    # bob fills both H100 nodes at the default priority
    held = [_submit(bob, "H100:8").json()["id"] for _ in range(2)]
    for job_id in held:
        until(lambda i=job_id: admin.job(i)["state"] == "scheduled", f"bob's job {job_id}")
    same = _submit(alice, "H100:8", 0).json()["id"]
    until(lambda: admin.job(same)["reason"] != "waiting for the scheduler", "a pass over it")
    assert "preempt" not in admin.job(same)["reason"]  # equal priority preempts nothing
    assert [admin.job(i)["state"] for i in held] == ["scheduled", "scheduled"]
    high = _submit(alice, "H100:8", 5).json()["id"]
    until(lambda: admin.job(high)["state"] == "scheduled", "alice's priority-5 job")
    states = sorted(admin.job(i)["state"] for i in held)
    assert states == ["pending", "scheduled"]  # exactly one victim, and it was bob's
    victim = next(i for i in held if admin.job(i)["state"] == "pending")
    assert any("preempted by job" in e["reason"] for e in admin.job(victim)["events"])
    assert admin.job(same)["state"] == "pending"


# ------------------------------------------------------------------------ per-tenant limits
def test_tenants_get_default_limits(admin: Admin) -> None:
    admin.tenant("dora")
    dora = next(t for t in admin.http.get("/v1/tenants").json() if t["name"] == "dora")
    assert dora["max_pending_jobs"] >= 100
    assert dora["max_replicas_per_job"] >= 64
    assert dora["max_pending_replicas"] >= dora["max_replicas_per_job"]
    assert dora["pending_jobs"] == 0 and dora["pending_replicas"] == 0


def test_a_submission_over_a_tenant_limit_is_refused_naming_it_and_nothing_is_stored(
    admin: Admin,
) -> None:
    carol, erin = admin.tenant("carol"), admin.tenant("erin")
    found = admin.cli(
        "tenant", "set", "carol",
        "--max-pending-jobs", "2", "--max-replicas-per-job", "4", "--max-pending-replicas", "5",
    )  # fmt: skip
    assert (found["max_pending_jobs"], found["max_replicas_per_job"]) == (2, 4)
    assert found["max_pending_replicas"] == 5
    before = admin.state("carol")
    r = _submit(carol, f"{NEVER_FITS} replicas=5")
    assert r.status_code == 403, r.text
    assert "max_replicas_per_job" in r.json()["reason"] and "4" in r.json()["reason"]
    assert admin.state("carol") == before

    first = [_submit(carol, f"{NEVER_FITS} replicas=2").json()["id"] for _ in range(2)]
    before = admin.state("carol")
    r = _submit(carol, NEVER_FITS)
    assert r.status_code == 429, r.text
    assert "max_pending_jobs" in r.json()["reason"] and "2" in r.json()["reason"]
    assert admin.state("carol") == before
    # the admin submitting for carol is held to carol's limits too
    body = {"command": ["x"], "spec": NEVER_FITS, "tenant": "carol"}
    assert admin.http.post("/v1/jobs", json=body).status_code == 429
    assert _submit(erin, NEVER_FITS).status_code == 201  # other tenants are not affected

    r = admin.http.patch("/v1/tenants/carol", json={"max_pending_jobs": 10})
    assert r.status_code == 200 and r.json()["max_pending_replicas"] == 5
    r = _submit(carol, f"{NEVER_FITS} replicas=2")
    assert r.status_code == 429, r.text
    reason = r.json()["reason"]
    assert "max_pending_replicas" in reason and "5" in reason and "4" in reason
    assert admin.state("carol") == before
    assert _submit(carol, NEVER_FITS).status_code == 201  # 5 replicas: at the limit, not over

    assert admin.http.post(f"/v1/jobs/{first[0]}/cancel").status_code == 200
    assert _submit(carol, f"{NEVER_FITS} replicas=2").status_code == 201
    usage = next(t for t in admin.http.get("/v1/tenants").json() if t["name"] == "carol")
    assert (usage["pending_jobs"], usage["pending_replicas"]) == (3, 5)


def test_bad_limits_are_422(admin: Admin) -> None:
    admin.tenant("fay")
    for body in ({"max_pending_jobs": -1}, {"max_replicas_per_job": 0}, {"x": 1}, {}):
        r = admin.http.patch("/v1/tenants/fay", json=body)
        assert r.status_code == 422, (body, r.text)
    assert admin.http.patch("/v1/tenants/nobody", json={"weight": 2}).status_code == 404
    tenant_token = admin.tenant("gus").headers["Authorization"]
    r = httpx.patch(
        f"{admin.srv.url}/v1/tenants/gus",
        json={"max_pending_jobs": 10**6},
        headers={"Authorization": tenant_token},
    )
    assert r.status_code == 403


# ------------------------------------------------------------------------ upgrade
def test_an_older_database_gets_cap_0_and_default_limits(tmp_path: Path) -> None:
    """A database from before these columns: they are added on start with their defaults, and a
    job queued back then at the highest priority does not preempt anyone now."""
    srv = ServerProc(tmp_path / "data", cluster=CLUSTER_MIXED)
    with srv:
        a = Admin(srv)
        bob, _ = a.tenant("bob"), a.tenant("old")
        held = [_submit(bob, "H100:8").json()["id"] for _ in range(2)]
        for job_id in held:
            until(lambda i=job_id: a.job(i)["state"] == "scheduled", f"bob's job {job_id}")
        defaults = next(t for t in a.http.get("/v1/tenants").json() if t["name"] == "old")
        a.close()
    with sqlite3.connect(srv.data / "state.db") as db:
        db.execute(
            "INSERT INTO jobs (id, name, tenant, queue, state, reason, priority, request, command,"
            " image, env, on_node_lost, flavor, exit_code, attempts, created_at, updated_at) "
            "VALUES (100, 'old', 'old', 'old', 'pending', 'waiting', 2147483647, ?, '[\"x\"]',"
            " NULL, '{}', 'requeue', NULL, NULL, 0, ?, ?)",
            (
                json.dumps({"name": "old", "devices": {"count": 8, "models": ["H100"]}}),
                time.time(),
                time.time(),
            ),
        )
        columns = {
            "queues": ["max_priority"],
            "tenants": ["max_pending_jobs", "max_replicas_per_job", "max_pending_replicas"],
        }
        for table, names in columns.items():
            for name in names:
                db.execute(f"ALTER TABLE {table} DROP COLUMN {name}")
    with srv:
        a = Admin(srv)
        assert a.http.get("/v1/queues/old").json()["max_priority"] == 0
        again = next(t for t in a.http.get("/v1/tenants").json() if t["name"] == "old")
        for key in ("max_pending_jobs", "max_replicas_per_job", "max_pending_replicas"):
            assert again[key] == defaults[key]
        until(lambda: a.job(100)["reason"] != "waiting", "a pass over the old job")
        assert [a.job(i)["state"] for i in held] == ["scheduled", "scheduled"]
        assert a.job(100)["state"] == "pending"
        assert "preempt" not in a.job(100)["reason"]
        a.close()
