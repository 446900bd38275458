"""Nodes, devices, agents and restarts: idempotent registration, heartbeats, lost nodes (with an
injected clock), cordons, and a restart that rebuilds exactly the same state from the store."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from server_kit import (
    BOTH_STORES,
    Server,
    devices,
    heartbeat,
    job,
    node,
    node_body,
    queue,
    reopen,
    report,
    row_counts,
    submit,
    tenant,
)
from test_scheduler_batches import statements_during

STORES = BOTH_STORES  # its tests' server on SQLite and on PostgreSQL (conftest.py)


@pytest.mark.slow
def test_register_twice_changes_nothing(server: Server) -> None:
    node(server, "n1")
    a = tenant(server, "a")
    j = submit(server, a, "A100:2")
    server.schedule()
    before = row_counts(server)
    gen = server.plane.capacity_gen
    engine = server.plane.engine
    again = node(server, "n1")
    assert again["devices"] == 8 and again["devices_free"] == 6
    assert row_counts(server) == before
    assert server.plane.engine is engine and server.plane.capacity_gen == gen  # no rebuild
    assert job(server, j["id"])["state"] == "scheduled"


@pytest.mark.slow
def test_reregister_with_other_devices_keeps_allocations_still_there(server: Server) -> None:
    node(server, "n1", count=4)
    a = tenant(server, "a")
    j = submit(server, a, "A100:2")
    server.schedule()
    used = {d["uuid"] for d in devices(server) if d["jobs"]}
    grown = node(server, "n1", count=8)
    assert grown["devices"] == 8 and grown["devices_free"] == 6
    assert {d["uuid"] for d in devices(server) if d["jobs"]} == used
    assert len(job(server, j["id"])["assignments"][0]["devices"]) == 2


def test_heartbeat_for_unknown_node_is_404(server: Server) -> None:
    r = server.client.post("/v1/agent/heartbeat", json={"node": "ghost"}, headers=server.admin)
    assert r.status_code == 404


def test_heartbeat_tells_agent_to_stop_what_it_was_not_given(server: Server) -> None:
    node(server, "n1", count=1)
    reply = heartbeat(server, "n1", [report(777, 0, "running")])
    assert reply["run"] == [] and reply["stop"] == [[777, 0]]


@pytest.mark.slow
def test_heartbeat_metrics_show_on_devices(server: Server) -> None:
    node(server, "n1", count=1)
    body = {"node": "n1", "metrics": [{"uuid": "n1-gpu0", "utilization_pct": 42.0}]}
    assert server.client.post("/v1/agent/heartbeat", json=body, headers=server.admin).is_success
    m = devices(server)[0]["metrics"]
    assert m["utilization_pct"] == 42.0 and m["power_w"] is None
    scrape = server.client.get("/metrics", headers=server.admin).text
    assert 'xpupool_device_utilization_ratio{model="A100-SXM4-80GB"' in scrape or (
        "xpupool_device_utilization_ratio{" in scrape
    )
    assert "xpupool_device_power_watts{" not in scrape  # unread is absent, not zero


@pytest.mark.slow
def test_replica_device_memory_is_exported_while_the_job_runs(server: Server) -> None:
    # Everything here is synchronous (no background threads, each request done when it returns),
    # so there is nothing to wait for. What can differ is the placement: the server only keeps a
    # measurement for a replica it placed on the reporting node, so check that first; otherwise a
    # job left pending would show up below as a mysteriously empty metric.
    node(server, "n1", count=1)
    a = tenant(server, "a")
    j = submit(server, a, "A100:1")
    assert server.schedule() == 1, job(server, j["id"])["reason"]
    (placed,) = job(server, j["id"])["assignments"]
    assert (placed["node"], [d["uuid"] for d in placed["devices"]]) == ("n1", ["n1-gpu0"])

    def samples() -> list[tuple[dict[str, str], float]]:
        text = server.client.get("/metrics", headers=server.admin).text
        return [
            (s.labels, s.value)
            for family in text_string_to_metric_families(text)
            if family.name == "xpupool_replica_device_memory_used_bytes"
            for s in family.samples
        ]

    def beat(rep: dict[str, Any]) -> None:
        reply = heartbeat(server, "n1", [rep])
        assert reply["stop"] == [], reply  # the server took the report as its replica's

    used = {**report(j["id"], 0, "running"), "memory_used_mib": {"n1-gpu0": 30000}}
    beat(used)
    labels = {"job": str(j["id"]), "replica": "0", "node": "n1", "uuid": "n1-gpu0"}
    assert samples() == [(labels, 30000 * 2**20)]
    beat(report(j["id"], 0, "running"))  # not measured this pass
    assert samples() == []
    beat(used)
    assert samples() == [(labels, 30000 * 2**20)]
    beat(report(j["id"], 0, "succeeded", exit_code=0))
    assert job(server, j["id"])["state"] == "succeeded"
    assert samples() == []  # released with the job


@pytest.mark.parametrize(("policy", "final"), [("requeue", "pending"), ("fail", "lost")])
@pytest.mark.slow
def test_lost_node_requeues_or_fails_per_job_policy(
    server: Server, policy: str, final: str
) -> None:
    from xpupool.server.services.agents import mark_lost_nodes

    node(server, "n1", count=2)
    node(server, "n2", count=2)
    a = tenant(server, "a")
    j = submit(server, a, "A100:2", on_node_lost=policy)
    server.schedule()
    where = job(server, j["id"])["assignments"][0]["node"]
    other = "n2" if where == "n1" else "n1"
    heartbeat(server, where, [report(j["id"], 0, "running")])
    server.clock.advance(20)
    heartbeat(server, other)
    assert mark_lost_nodes(server.plane) == []
    server.clock.advance(11)  # where: 31 s silent > 30; other: 11 s
    assert mark_lost_nodes(server.plane) == [where]
    # lost, but the lease on its replica (24 s, 10 s grace, 1 s margin) may not be over yet:
    # the job keeps its devices, so no second copy can start
    assert job(server, j["id"])["state"] == "running"
    assert any(d["jobs"] for d in devices(server))
    server.clock.advance(5)  # 36 s silent: surely over
    assert mark_lost_nodes(server.plane) == []
    got = job(server, j["id"])
    assert got["state"] == final and f"node {where} lost" in got["reason"]
    assert got["attempts"] == 1  # it ran once
    assert got["retries"] == (1 if policy == "requeue" else 0)
    r = server.client.get(f"/v1/nodes/{where}", headers=server.admin).json()
    assert r["status"] == "lost" and not r["schedulable"]
    assert all(not d["jobs"] for d in devices(server))
    server.schedule()
    if policy == "requeue":  # placed again, on the node still alive
        assert job(server, j["id"])["assignments"][0]["node"] == other
    # the lost node comes back with a heartbeat
    heartbeat(server, where)
    r = server.client.get(f"/v1/nodes/{where}", headers=server.admin).json()
    assert r["status"] == "ready" and r["schedulable"]


def test_cluster_nodes_are_never_lost(server: Server) -> None:
    from xpupool.model.device import Node
    from xpupool.server.services import fleet
    from xpupool.server.services.agents import mark_lost_nodes

    fleet.register_many(server.plane, [Node("sim1", 1000, 1024)], source="cluster")
    server.clock.advance(1000)
    assert mark_lost_nodes(server.plane) == []


def test_a_cluster_file_is_stored_in_one_statement_outside_the_rows_making(server: Server) -> None:
    """CI saw a 5,000-node first start lose its store: one INSERT per node, and each row's
    JSON made inside the transaction, held SQLite's write lock for the whole lease on a loaded
    host, and the lease's renewal waits behind that lock (``server/ownership.py``). The nodes
    are one statement now, and all of them are stored and served."""
    from xpupool.model.device import Device, Node
    from xpupool.server.services import fleet

    def card(n: int, i: int) -> Device:
        return Device(f"c-{n}-{i}", "nvidia", "NVIDIA A100-SXM4-80GB", 81920, index=i)

    nodes = [Node(f"f{n}", 64000, 512000, tuple(card(n, i) for i in range(4))) for n in range(300)]
    sql = statements_during(
        server.plane, lambda: fleet.register_many(server.plane, nodes, source="cluster")
    )
    inserts = [s for s in sql if s.upper().startswith("INSERT INTO NODES")]
    assert len(inserts) == 1, sql
    assert row_counts(server)["nodes"] == 300
    listed = server.client.get("/v1/nodes", headers=server.admin, params={"limit": 1000}).json()
    assert len(listed) == 300 and all(n["devices"] == 4 for n in listed)


@pytest.mark.slow
def test_cordon_node_and_device(server: Server) -> None:
    node(server, "n1", count=2)
    node(server, "n2", count=2)
    a = tenant(server, "a")
    r = server.client.post("/v1/nodes/n1/cordon", headers=server.admin)
    assert r.status_code == 200 and r.json()["schedulable"] is False
    r = server.client.post("/v1/devices/n2-gpu0/cordon", headers=server.admin)
    assert r.status_code == 200 and r.json()["cordoned"] is True
    j = submit(server, a, "A100:2")
    one = submit(server, a, "A100:1")
    server.schedule()
    assert job(server, j["id"])["state"] == "pending"
    got = job(server, one["id"])
    assert [d["uuid"] for d in got["assignments"][0]["devices"]] == ["n2-gpu1"]
    server.client.post("/v1/devices/n2-gpu0/uncordon", headers=server.admin)
    server.client.post("/v1/nodes/n1/uncordon", headers=server.admin)
    server.schedule()
    assert job(server, j["id"])["state"] == "scheduled"
    for path in ["/v1/nodes/nope/cordon", "/v1/devices/nope/cordon", "/v1/nodes/nope"]:
        method = "GET" if path == "/v1/nodes/nope" else "POST"
        assert server.client.request(method, path, headers=server.admin).status_code == 404


def test_sites_count_nodes_and_free_devices(server: Server) -> None:
    body = node_body("n1", count=2) | {"site": "bj"}
    server.client.post("/v1/agent/register", json=body, headers=server.admin)
    node(server, "n2", count=1)
    sites = server.client.get("/v1/sites", headers=server.admin).json()
    assert [(s["name"], s["devices"], s["devices_free"]) for s in sites] == [
        ("bj", 2, 2),
        ("default", 1, 1),
    ]
    assert all(s["kind"] == "agents" and s["pending"] == 0 for s in sites)
    heartbeat(server, "n1")  # bj heard from now
    a = tenant(server, "a")
    held = submit(server, a, "A100:1 site=bj")["id"]
    server.schedule()
    assert job(server, held)["state"] == "scheduled"
    bj = server.client.get("/v1/sites", headers=server.admin).json()[0]
    assert bj["name"] == "bj" and bj["last_contact"] == pytest.approx(server.clock.now)
    assert (bj["devices_allocated"], bj["devices_free"]) == (1, 1)


def snapshot(srv: Server) -> dict[str, Any]:
    """Everything a restart must keep: jobs (with events and assignments), devices, queues, and
    the engine's free columns and live allocations."""
    st = srv.plane.engine.state
    admin = srv.admin
    return {
        "jobs": srv.client.get("/v1/jobs", headers=admin).json(),
        "devices": srv.client.get("/v1/devices", headers=admin).json(),
        "queues": srv.client.get("/v1/queues", headers=admin).json(),
        "events": [
            job(srv, j["id"])["events"] for j in srv.client.get("/v1/jobs", headers=admin).json()
        ],
        "pending": sorted(srv.plane.queued),
        "held": sorted(srv.plane.held_jobs),
        "live": sorted((a.id, a.node, a.devices) for a in st.live.values()),
        "arrays": {
            k: getattr(st, k).tolist()
            for k in ("dev_mem_free", "dev_core_free", "node_cpu_free", "node_mem_free")
        },
        "usage": {q: dict(u) for q, u in srv.plane.admission.usage.items()},
    }


@pytest.mark.slow
def test_restart_rebuilds_the_same_state(server: Server) -> None:
    node(server, "n1")
    node(server, "n2", count=4, model="NVIDIA L20", memory_mib=46068)
    a, b = tenant(server, "a"), tenant(server, "b")
    queue(server, "qa", "a", [{"flavor": "nvidia", "resource": "devices", "nominal": 6}])
    running = submit(server, a, "A100:2", queue="qa")
    submit(server, a, "A100 mem=20Gi cores=30%", queue="qa")
    submit(server, b, "L20:1 replicas=2")
    submit(server, a, "A100:4", queue="qa")  # over quota: pending
    server.schedule()
    where = job(server, running["id"])["assignments"][0]["node"]
    heartbeat(server, where, [report(running["id"], 0, "running")])
    cancelled = submit(server, b, "L20:1")
    server.client.post(f"/v1/jobs/{cancelled['id']}/cancel", headers=server.admin)
    before = snapshot(server)
    assert len(before["held"]) == 3 and len(before["pending"]) == 1

    server.client.close()
    restarted = reopen(server)
    plane = restarted.plane
    with restarted.client:
        assert snapshot(restarted) == before
        # the rebuilt plane goes on: new allocations get fresh ids, nothing is placed twice
        j = submit(restarted, b, "L20:1")
        restarted.schedule()
        assert job(restarted, j["id"])["state"] == "scheduled"
        ids = [a.id for a in plane.engine.state.live.values()]
        assert len(ids) == len(set(ids))
    plane.db.dispose()


@pytest.mark.slow
def test_over_committed_cards_export_committed_physical_and_committable(server: Server) -> None:
    """A node registered with over-commit factors and a task limit per card: the devices list and
    the metrics show what is granted against the physical card and what may be granted."""
    body = node_body("oc", count=1)
    body["devices"][0] |= {"memory_overcommit": 1.5, "cores_overcommit": 2.0, "max_tasks": 3}
    assert server.client.post("/v1/agent/register", json=body, headers=server.admin).is_success
    a = tenant(server, "a")
    for _ in range(3):
        submit(server, a, "A100:1 mem=50% cores=60%")
    assert server.schedule() == 3
    (dev,) = devices(server, "oc")
    assert (dev["allocated_memory_mib"], dev["memory_mib"]) == (3 * 40960, 81920)
    assert (dev["committable_memory_mib"], dev["committable_core_permille"]) == (122880, 2000)
    assert dev["allocated_core_permille"] == 1800
    families = {
        f.name: {s.labels.get("uuid"): s.value for s in f.samples}
        for f in text_string_to_metric_families(
            server.client.get("/metrics", headers=server.admin).text
        )
    }
    mib = 2**20
    assert families["xpupool_device_memory_allocated_bytes"]["oc-gpu0"] == 3 * 40960 * mib
    assert families["xpupool_device_memory_total_bytes"]["oc-gpu0"] == 81920 * mib
    assert families["xpupool_device_memory_committable_bytes"]["oc-gpu0"] == 122880 * mib
    assert families["xpupool_device_cores_allocated_ratio"]["oc-gpu0"] == pytest.approx(1.8)
    assert families["xpupool_device_cores_committable_ratio"]["oc-gpu0"] == 2.0


@pytest.mark.parametrize(
    ("field", "value"),
    [("memory_overcommit", 0.5), ("cores_overcommit", "inf"), ("max_tasks", 0)],
)
def test_a_bad_capacity_setting_is_refused_naming_the_field(
    server: Server, field: str, value: object
) -> None:
    body = node_body("bad", count=1)
    body["devices"][0][field] = value
    r = server.client.post("/v1/agent/register", json=body, headers=server.admin)
    assert r.status_code == 422, r.text
    assert field in r.text
    assert all(d["node"] != "bad" for d in devices(server))


def _stranded_gauges(srv: Server) -> dict[str, dict[str, float]]:
    """The ``/metrics`` stranded gauges: by metric name, node -> value."""
    text = srv.client.get("/metrics", headers=srv.admin).text
    found: dict[str, dict[str, float]] = {}
    for f in text_string_to_metric_families(text):
        if f.name.startswith("xpupool_node_stranded_device_"):
            found[f.name] = {s.labels["node"]: s.value for s in f.samples}
    return found


def test_stranded_gauges_are_the_fleet_overviews_figure(server: Server) -> None:
    """Issue 42 part 4: the gauges summed to 2,384 GiB on an idle pool while the fleet overview
    and the dashboard said 0, because they measured against the scheduler's learned workload
    alone and the overview against the pending jobs' shapes and the common ones. One figure
    now: the T4 node's idle card is wanted by a one-card job even though only half-card A100
    jobs were ever asked for, so nothing is stranded, in the gauges as in the overview."""
    node(server, "a", count=1)
    node(server, "t", count=1, model="Tesla T4", memory_mib=15360)
    a = tenant(server, "a")
    submit(server, a, "A100:1 cores=50%")
    assert server.schedule() == 1
    fleet = server.client.get("/v1/fleet/overview", headers=server.as_(server.admin_token))
    stranded = fleet.json()["stranded"]
    gauges = _stranded_gauges(server)
    memory = gauges["xpupool_node_stranded_device_memory_bytes"]
    cores = gauges["xpupool_node_stranded_device_cores"]
    assert sum(memory.values()) == stranded["memory_mib"] * (1 << 20) == 0
    assert sum(cores.values()) * 100 == stranded["core_pct"] == 0
    assert set(memory) == {"a", "t"}  # every live node has its gauge, 0 included


def test_stranded_gauges_follow_a_fragment_no_job_shape_fits(server: Server) -> None:
    """10 % of a card left on a card some job shares fits no pending or common shape: stranded,
    the same figure per node in ``/metrics`` as in the overview."""
    node(server, "a", count=1)
    a = tenant(server, "a")
    submit(server, a, "A100:1 cores=90%")
    assert server.schedule() == 1
    fleet = server.client.get("/v1/fleet/overview", headers=server.as_(server.admin_token))
    stranded = fleet.json()["stranded"]
    gauges = _stranded_gauges(server)
    assert stranded["core_pct"] == 10.0
    assert gauges["xpupool_node_stranded_device_cores"] == {"a": 0.1}
    memory = gauges["xpupool_node_stranded_device_memory_bytes"]
    assert memory == {"a": stranded["memory_mib"] * (1 << 20)}


def test_a_node_joining_keeps_the_workload_the_engine_learned(server: Server) -> None:
    # A node that joins rebuilds the engine; the new one goes on from the old one's learned
    # workload instead of learning from nothing again (at fleet size, a cold start rebuilds
    # the fragmentation measure over every node about 20 times in its first requests).
    node(server, "n1")
    a = tenant(server, "a")
    for _ in range(4):
        submit(server, a, "A100:1")
    server.schedule()  # re-learns once the pass is done
    model = server.plane.engine._model(server.plane.engine.profile)
    learned = [r.name for r in model.seen]
    assert len(learned) == 4 and model.frag.workload.shapes and not model.due
    engine = server.plane.engine
    node(server, "n2")
    assert server.plane.engine is not engine  # rebuilt for the new node
    rebuilt = server.plane.engine._model(server.plane.engine.profile)
    assert [r.name for r in rebuilt.seen] == learned
    assert rebuilt.frag.workload.weights == model.frag.workload.weights
    assert rebuilt.deferred  # the scheduling pass re-learns, as on the engine before


def test_a_restarted_server_learns_its_workload_from_the_last_jobs(server: Server) -> None:
    # After a restart the engine starts from the jobs submitted before it, as the engine before
    # the restart had, instead of a cold start that rebuilds on every few of the first requests.
    node(server, "n1")
    a = tenant(server, "a")
    for spec in ("A100:1", "A100:2", "A100:1"):
        submit(server, a, spec)
    server.schedule()
    again = reopen(server)
    try:
        engine = again.plane.engine
        model = engine._model(engine.profile)
        assert [r.devices.count for r in model.seen] == [1, 2, 1]
        assert sorted(s.devices.count for s in model.frag.workload.shapes) == [1, 2]
        assert model.frag.workload.weights == pytest.approx((2 / 3, 1 / 3))
    finally:
        again.plane.db.dispose()
