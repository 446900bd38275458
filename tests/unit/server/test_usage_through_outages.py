"""Usage equals the integral of the allocations, read against the jobs' own timestamped events
(issue 52), through a node lost mid-run (the job's ``on_node_lost: requeue``: two attempts, two
records, the first ended where the job was requeued, the second begun where it ran again, no
overlap) and through a Kubernetes site that stops answering and comes back (the run's cards held
all along, counted once). The plane runs on a hand-moved clock, so every time is exact."""

from __future__ import annotations

from typing import Any

import pytest
from server_kit import Server, heartbeat, job, node, report, submit, tenant
from sqlalchemy import func, select
from test_site_foreign_use import SITE, kube  # noqa: F401  (kube: the fixture)

from xpupool.k8s.site.site import KubernetesSite
from xpupool.server.schemas.agent_protocol import ReplicaReport, ReplicaState
from xpupool.server.services import agents
from xpupool.server.services.agents import mark_lost_nodes
from xpupool.server.storage.usage import usage_records, usage_rollups, usage_totals
from xpupool.server.usage.meter import POOL


def _records(srv: Server) -> list[dict[str, Any]]:
    with srv.plane.db.connect() as conn:
        t = usage_records
        rows = conn.execute(select(t).order_by(t.c.attempt, t.c.started_at)).mappings()
        return [dict(r) for r in rows]


def _held_seconds(srv: Server) -> dict[str, float]:
    """Card-seconds of the tenants (not the pool's) in the hourly rollups and the totals."""
    out = {}
    with srv.plane.db.connect() as conn:
        for name, t, where in (
            ("hours", usage_rollups, usage_rollups.c.step == "hour"),
            ("totals", usage_totals, usage_totals.c.tenant == usage_totals.c.tenant),
        ):
            found = conn.execute(
                select(func.sum(t.c.device_seconds)).where(where, t.c.tenant != POOL)
            ).scalar()
            out[name] = float(found or 0.0)
    return out


def _events(srv: Server, job_id: int, state: str) -> list[float]:
    return [e["at"] for e in job(srv, job_id)["events"] if e["state"] == state]


@pytest.mark.slow
def test_a_run_on_a_lost_node_and_its_requeued_attempt_are_two_records_that_add_up(
    server: Server,
) -> None:
    node(server, "n1", count=1)
    node(server, "n2", count=1)
    a = tenant(server, "a")
    j = submit(server, a, "A100:1", on_node_lost="requeue")["id"]
    server.schedule()
    where = job(server, j)["assignments"][0]["node"]
    other = "n2" if where == "n1" else "n1"
    heartbeat(server, where)
    heartbeat(server, where, [report(j, 0, "running")])
    server.clock.advance(20)
    server.plane.meter.flush(server.plane)
    heartbeat(server, other)
    server.clock.advance(16)  # where: silent past lost_after_s and its replica's lease
    heartbeat(server, other)
    mark_lost_nodes(server.plane)
    server.clock.advance(5)
    heartbeat(server, other)
    mark_lost_nodes(server.plane)
    assert job(server, j)["state"] == "pending"
    server.plane.meter.flush(server.plane)
    server.clock.advance(7)
    server.schedule()
    assert job(server, j)["assignments"][0]["node"] == other
    heartbeat(server, other)
    server.clock.advance(3)
    heartbeat(server, other, [{**report(j, 0, "running"), "attempt": 2}])
    server.clock.advance(40)
    heartbeat(server, other, [{**report(j, 0, "succeeded", 0), "attempt": 2}])
    server.clock.advance(9)  # the flush comes later: each record ends where its run did
    server.plane.meter.flush(server.plane)

    first, second = _records(server)
    ran = _events(server, j, "running")
    requeued = _events(server, j, "pending")[-1]
    done = _events(server, j, "succeeded")[0]
    assert (first["attempt"], first["node"], second["attempt"], second["node"]) == (
        1,
        where,
        2,
        other,
    )
    assert (first["started_at"], first["ended_at"]) == (ran[0], requeued)
    assert (second["started_at"], second["ended_at"]) == (ran[-1], done)
    assert first["ended_at"] <= second["started_at"]  # no overlap
    integral = (requeued - ran[0]) + (done - ran[-1])
    assert first["device_seconds"] + second["device_seconds"] == pytest.approx(integral)
    assert _held_seconds(server) == {
        "hours": pytest.approx(integral),
        "totals": pytest.approx(integral),
    }


def test_a_site_unreachable_and_back_counts_its_run_once(
    kube: tuple[Server, KubernetesSite],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    srv, site = kube
    plane = srv.plane
    up = [True]  # whether the site's API server answers its watches (site_health asks)
    monkeypatch.setattr(site, "answering", lambda: {"k1"} if up[0] else None)
    node(srv, "a1", count=1)  # an agent site too: a pool of one site has no site to lose

    def watch() -> None:
        """A round of the lost-node watch, the agent site answering."""
        heartbeat(srv, "a1")
        mark_lost_nodes(plane)

    a = tenant(srv, "a")
    j = submit(srv, a, f"A100:1 site={SITE}", image="train:1")["id"]
    srv.schedule()
    where = job(srv, j)["assignments"][0]["node"]

    def pod(state: ReplicaState) -> None:
        """What the site's pod watch reports of the job's pod."""
        agents.site_reports(plane, [(where, ReplicaReport(job_id=j, replica=0, state=state))])

    pod(ReplicaState.RUNNING)
    assert job(srv, j)["state"] == "running"
    srv.clock.advance(100)
    plane.meter.flush(plane)
    up[0] = False  # the API server stops answering
    srv.clock.advance(plane.lost_after_s + 1)
    watch()
    assert job(srv, j)["state"] == "unknown"  # its cards held all along
    plane.meter.flush(plane)
    srv.clock.advance(20 * plane.lost_after_s)
    watch()
    plane.meter.flush(plane)
    up[0] = True  # back: the pod still runs, as its watch says again
    watch()
    pod(ReplicaState.RUNNING)
    assert job(srv, j)["state"] == "running"
    srv.clock.advance(50)
    pod(ReplicaState.SUCCEEDED)
    srv.clock.advance(5)
    plane.meter.flush(plane)

    (rec,) = _records(srv)  # one record: the run is not counted again when the site is back
    began, done = _events(srv, j, "running")[0], _events(srv, j, "succeeded")[0]
    assert (rec["started_at"], rec["ended_at"]) == (began, done)
    assert rec["device_seconds"] == pytest.approx(done - began)
    assert _held_seconds(srv) == {
        "hours": pytest.approx(done - began),
        "totals": pytest.approx(done - began),
    }
