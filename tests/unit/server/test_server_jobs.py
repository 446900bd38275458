"""Job life cycle through the API: events with timestamps and reasons, cancel in each state,
logs, list filters, and input errors that name the field and store nothing."""

from __future__ import annotations

from typing import Any

import pytest
from server_kit import (
    BOTH_STORES,
    Server,
    devices,
    heartbeat,
    job,
    node,
    report,
    row_counts,
    states,
    submit,
    tenant,
)

STORES = BOTH_STORES  # its tests' server on SQLite and on PostgreSQL (conftest.py)


@pytest.mark.slow
def test_events_pending_admitted_scheduled_running_succeeded(server: Server) -> None:
    node(server, "n1")
    a = tenant(server, "a")
    t0 = server.clock.now
    j = submit(server, a, "A100:2", name="train", command=["python", "train.py"])
    assert j["state"] == "pending" and j["name"] == "train"
    assert j["events"] == [{"at": t0, "state": "pending", "reason": "submitted"}]
    server.clock.advance(1)
    assert server.schedule() == 1
    got = job(server, j["id"], a)
    assert got["state"] == "scheduled" and got["flavor"] == "*"
    assert [len(x["devices"]) for x in got["assignments"]] == [2]
    assert got["assignments"][0]["node"] == "n1"
    ev = got["events"]
    assert [e["state"] for e in ev] == ["pending", "admitted", "scheduled"]
    assert [e["at"] for e in ev] == [t0, t0 + 1, t0 + 1]
    assert "queue a" in ev[1]["reason"] and ev[2]["reason"] == "on n1"

    server.clock.advance(1)
    reply = heartbeat(server, "n1")
    assert [(w["job_id"], w["replica"]) for w in reply["run"]] == [(j["id"], 0)]
    work = reply["run"][0]
    assert work["command"] == ["python", "train.py"]
    assert len(work["assignment"]["devices"]) == 2
    heartbeat(server, "n1", [report(j["id"], 0, "running")])
    server.clock.advance(5)
    heartbeat(server, "n1", [report(j["id"], 0, "succeeded", 0)])
    got = job(server, j["id"], a)
    assert got["state"] == "succeeded" and got["exit_code"] == 0 and got["assignments"] == []
    assert [e["state"] for e in got["events"]][3:] == ["scheduled", "running", "succeeded"]
    assert got["events"][3]["reason"] == "attempt 1 handed to n1" and got["attempts"] == 1
    assert [e["at"] for e in got["events"]][3:] == [t0 + 2, t0 + 2, t0 + 7]
    assert all(d["allocated_memory_mib"] == 0 and d["jobs"] == [] for d in devices(server))


def test_a_replica_that_ended_between_heartbeats_still_records_running(server: Server) -> None:
    """The agent may first report a short job already finished: the history still says it ran."""
    node(server, "n1")
    a = tenant(server, "a")
    j = submit(server, a, "A100 mem=20Gi")
    server.schedule()
    heartbeat(server, "n1")
    heartbeat(server, "n1", [report(j["id"], 0, "succeeded", 0)])
    assert states(server, j["id"]) == [
        "pending",
        "admitted",
        "scheduled",
        "scheduled",  # attempt 1 handed out
        "running",
        "succeeded",
    ]


def test_failed_replica_stops_the_others_then_fails_the_job(server: Server) -> None:
    node(server, "n1")
    a = tenant(server, "a")
    j = submit(server, a, "A100:1 replicas=2")
    server.schedule()
    assert len(heartbeat(server, "n1")["run"]) == 2
    heartbeat(server, "n1", [report(j["id"], 0, "running"), report(j["id"], 1, "running")])
    reply = heartbeat(server, "n1", [report(j["id"], 1, "failed", 3)])
    assert reply["stop"] == [[j["id"], 0]]  # the job is over: its other replica must go
    assert job(server, j["id"])["state"] == "running"
    heartbeat(server, "n1", [report(j["id"], 0, "stopped")])
    got = job(server, j["id"])
    assert got["state"] == "failed" and got["exit_code"] == 3
    assert "replica 1 failed" in got["reason"]
    assert all(d["allocated_memory_mib"] == 0 for d in devices(server))


@pytest.mark.slow
def test_cancel_pending_scheduled_and_running(server: Server) -> None:
    node(server, "n1", count=2)
    a = tenant(server, "a")
    sched = submit(server, a, "A100:1")
    run = submit(server, a, "A100:1")
    server.schedule()
    pend = submit(server, a, "A100:1")
    server.schedule()
    assert job(server, pend["id"])["state"] == "pending"

    r = server.client.post(f"/v1/jobs/{pend['id']}/cancel", headers=server.as_(a))
    assert r.status_code == 200 and r.json()["state"] == "cancelled"
    assert (
        server.client.post(f"/v1/jobs/{pend['id']}/cancel", headers=server.as_(a)).status_code
        == 409
    )

    # scheduled but never handed to an agent: cancelled and released at once
    r = server.client.post(f"/v1/jobs/{sched['id']}/cancel", headers=server.as_(a))
    assert r.json()["state"] == "cancelled" and r.json()["assignments"] == []
    # running: the agent is told to stop; devices stay held until it reports the process gone
    heartbeat(server, "n1", [report(run["id"], 0, "running")])
    r = server.client.post(f"/v1/jobs/{run['id']}/cancel", headers=server.as_(a))
    assert r.json()["state"] == "running" and r.json()["reason"].startswith("stopping")
    assert sum(d["allocated_memory_mib"] > 0 for d in devices(server)) == 1
    assert heartbeat(server, "n1")["stop"] == [[run["id"], 0]]
    heartbeat(server, "n1", [report(run["id"], 0, "stopped")])
    assert job(server, run["id"])["state"] == "cancelled"
    assert all(d["allocated_memory_mib"] == 0 for d in devices(server))
    assert states(server, pend["id"]) == ["pending", "cancelled"]


@pytest.mark.slow
def test_logs_are_appended_by_the_agent_and_read_from_an_offset(server: Server) -> None:
    node(server, "n1", count=1)
    a = tenant(server, "a")
    j = submit(server, a, "A100:1")
    server.schedule()
    url = f"/v1/agent/nodes/n1/jobs/{j['id']}/replicas/0/logs"
    assert server.client.post(url, content=b"hello ", headers=server.admin).status_code == 204
    assert server.client.post(url, content=b"world\n", headers=server.admin).status_code == 204
    r = server.client.get(f"/v1/jobs/{j['id']}/logs", headers=server.as_(a))
    assert r.text == "hello world\n"
    r = server.client.get(f"/v1/jobs/{j['id']}/logs?offset=6", headers=server.as_(a))
    assert r.text == "world\n"
    # another node may not write this replica's log
    node(server, "n2", count=1)
    bad = f"/v1/agent/nodes/n2/jobs/{j['id']}/replicas/0/logs"
    assert server.client.post(bad, content=b"x", headers=server.admin).status_code == 404


@pytest.mark.slow
def test_list_filters_state_queue_tenant_limit(server: Server) -> None:
    node(server, "n1", count=1)
    a, b = tenant(server, "a"), tenant(server, "b")
    ids = [submit(server, a, "A100:1")["id"], submit(server, a, "A100:1")["id"]]
    jb = submit(server, b)["id"]
    server.schedule()

    def listed(token: str, **params: Any) -> list[int]:
        r = server.client.get("/v1/jobs", params=params, headers=server.as_(token))
        assert r.status_code == 200, r.text
        return [j["id"] for j in r.json()]

    assert listed(server.admin_token) == [jb, ids[1], ids[0]]  # newest first
    assert listed(server.admin_token, tenant="b") == [jb]
    assert listed(a, state="pending") == [ids[1]]
    assert listed(a, queue="a", limit=1) == [ids[1]]
    pending = job(server, ids[1])
    assert "devices" in pending["reason"] or "memory" in pending["reason"], pending["reason"]


BAD_JOBS: list[tuple[dict[str, Any], str]] = [
    ({"spec": "A100:2 mem=24Gx"}, "spec.devices.memory"),
    ({"request": {"devices": {"count": 1, "memroy": "1Gi"}}}, "request.devices.memroy"),
    ({"request": {"replicas": "two"}}, "request.replicas"),
    ({"spec": "A100", "request": {}}, "body"),  # cross-field: the reason names both fields
    ({"queue": "nope"}, "queue"),
    ({"queue": "Bad Name"}, "queue"),
    ({"priority": 1 << 40}, "priority"),
    ({"on_node_lost": "explode"}, "on_node_lost"),
    ({"colour": "red"}, "colour"),
    ({"request": {"node_policy": "no-such-policy"}}, "request.node_policy"),
    ({"env": {"A=B": "1"}}, "body"),
    ({"command": "not a list"}, "command"),
]


@pytest.mark.parametrize(("body", "field"), BAD_JOBS)
def test_bad_job_is_422_naming_the_field_and_stores_nothing(
    server: Server, body: dict[str, Any], field: str
) -> None:
    a = tenant(server, "a")
    before = row_counts(server)
    r = server.client.post("/v1/jobs", json=body, headers=server.as_(a))
    assert r.status_code == 422, r.text
    got = r.json()
    assert {"field", "value", "reason"} <= got.keys() and got["reason"]
    assert got["field"] == field
    assert row_counts(server) == before
    assert server.plane.queued == {}


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/tenants", {"name": "UPPER"}, "name"),
        ("/v1/tenants", {"name": "ok", "weight": 0}, "weight"),
        ("/v1/tenants", {"name": "ok", "extra": 1}, "extra"),
        ("/v1/tenants/a/tokens", {"role": "root"}, "role"),
        ("/v1/agent/register", {"name": "n", "cpu_milli": -1, "memory_mib": 1}, "cpu_milli"),
        (
            "/v1/agent/register",
            {
                "name": "n",
                "cpu_milli": 1,
                "memory_mib": 1,
                "devices": [
                    {"uuid": "u", "vendor": "nvidia", "model": "A100", "memory_mib": 1},
                    {"uuid": "u", "vendor": "nvidia", "model": "A100", "memory_mib": 1},
                ],
            },
            "body",  # cross-field: the reason names devices[1].uuid
        ),
    ],
)
@pytest.mark.slow
def test_bad_admin_input_is_422_and_stores_nothing(
    server: Server, path: str, body: dict[str, Any], field: str
) -> None:
    tenant(server, "a")
    before = row_counts(server)
    r = server.client.post(path, json=body, headers=server.admin)
    assert r.status_code == 422, r.text
    assert r.json()["field"] == field
    assert row_counts(server) == before


def test_admin_must_name_the_tenant(server: Server) -> None:
    tenant(server, "a")
    r = server.client.post("/v1/jobs", json={}, headers=server.admin)
    assert r.status_code == 422 and r.json()["field"] == "tenant"
    assert "--tenant" in r.json()["reason"] and "XPUPOOL_TOKEN" in r.json()["reason"]
    r = server.client.post(
        "/v1/jobs", json={"tenant": "a", "command": ["true"]}, headers=server.admin
    )
    assert r.status_code == 201 and r.json()["tenant"] == "a"


def test_unknown_job_is_404(server: Server) -> None:
    for method, suffix in [("GET", ""), ("POST", "/cancel"), ("GET", "/logs")]:
        r = server.client.request(method, f"/v1/jobs/12345{suffix}", headers=server.admin)
        assert r.status_code == 404
