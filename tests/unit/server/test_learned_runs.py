"""The run times the plane learns per request shape survive a restart (issue 55): a plane reopened
on the same store (SQLite and PostgreSQL) reads them back from the jobs that succeeded, the run
counted as the live plane counted it (the succeeded run's end less its start), so the site
choice's wait estimate and the moves to faster cards weigh what they weighed before it."""

from __future__ import annotations

import pytest
from server_kit import BOTH_STORES, Server, heartbeat, job, node, reopen, report, submit, tenant

from xpupool.engine.cycle.faster_cards import FasterRule
from xpupool.engine.site_choice import RunTimes
from xpupool.model.request import Request
from xpupool.model.request_model import request_from_dict
from xpupool.server.plane import faster_moves, learned_runs, store

STORES = BOTH_STORES


def stored_request(srv: Server, job_id: int) -> Request:
    """Job ``job_id``'s request as the store keeps it (what the plane learns the run under)."""
    with srv.plane.db.connect() as conn:
        return request_from_dict(store.job_row(conn, job_id)["request"])


def ran(srv: Server, token: str, spec: str, seconds: float, end: str = "succeeded") -> int:
    """A job of ``spec`` placed on node n1, running for ``seconds``, then ending as ``end``
    (``succeeded``, ``failed`` or ``cancelled``). Returns its id."""
    made = submit(srv, token, spec)["id"]
    srv.schedule()
    assert job(srv, made)["state"] == "scheduled"
    heartbeat(srv, "n1", [report(made, 0, "running")])
    srv.clock.advance(seconds)
    if end == "cancelled":
        r = srv.client.post(f"/v1/jobs/{made}/cancel", headers=srv.as_(token))
        assert r.status_code < 300, r.text
        heartbeat(srv, "n1", [report(made, 0, "stopped")])
    else:
        heartbeat(srv, "n1", [report(made, 0, end, 0 if end == "succeeded" else 1)])
    assert job(srv, made)["state"] == end
    return int(made)


def test_a_restarted_plane_learns_the_run_times_of_the_jobs_that_succeeded(
    server: Server,
) -> None:
    """Three runs of one shape and one of another succeed; one of the first shape fails and one
    is cancelled (neither counts). Reopened, the plane gives each shape the mean and count it
    gave before."""
    faster_moves.use(server.plane, FasterRule())
    node(server, "n1", count=2)
    a = tenant(server, "a")
    one = [ran(server, a, "A100:1", s) for s in (120.0, 300.5, 45.25)]
    two = ran(server, a, "A100:2", 900.0)
    ran(server, a, "A100:1", 7000.0, "failed")
    ran(server, a, "A100:1", 8000.0, "cancelled")
    shapes = [stored_request(server, one[0]), stored_request(server, two)]
    before = [server.plane.site_dispatch.runtimes.learned(r) for r in shapes]
    assert before[0] is not None and before[0][1] == 3
    assert before[0][0] == pytest.approx((120.0 + 300.5 + 45.25) / 3)
    assert before[1] == (900.0, 1)
    restarted = reopen(server)
    try:
        after = [restarted.plane.site_dispatch.runtimes.learned(r) for r in shapes]
    finally:
        restarted.plane.db.dispose()
    assert after[1] == before[1]
    assert after[0] is not None and after[0][1] == before[0][1]
    assert after[0][0] == pytest.approx(before[0][0], rel=1e-12)  # summed in the same order


def test_a_restarted_plane_learns_them_without_the_moves_or_sites_turned_on_yet(
    server: Server,
) -> None:
    """A plane with one site and no moves learns nothing live (nothing weighs it); the plane
    that opens on its store reads the runs all the same, since ``xpupool up --move-faster`` is
    turned on after the plane opens and a site's nodes may come later."""
    node(server, "n1", count=1)
    a = tenant(server, "a")
    done = ran(server, a, "A100:1", 600.0)
    shape = stored_request(server, done)
    assert server.plane.site_dispatch.runtimes.learned(shape) is None
    restarted = reopen(server)
    try:
        assert restarted.plane.site_dispatch.runtimes.learned(shape) == (600.0, 1)
    finally:
        restarted.plane.db.dispose()


def test_the_rebuild_reads_only_the_newest_succeeded_jobs_up_to_its_limit(server: Server) -> None:
    """Five runs succeeded: read with a limit of three, the three newest jobs count."""
    node(server, "n1", count=1)
    a = tenant(server, "a")
    done = [ran(server, a, "A100:1", s) for s in (100.0, 200.0, 300.0, 400.0, 500.0)]
    times = RunTimes()
    with server.plane.db.connect() as conn:
        assert learned_runs.relearn(conn, times, limit=3) == 3
    assert times.learned(stored_request(server, done[0])) == (400.0, 3)
