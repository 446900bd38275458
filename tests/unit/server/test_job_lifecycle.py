"""The job lifecycle's transition table (server/job_lifecycle.py): every legal move, the illegal
ones refused, and the stored side (``ControlPlane.apply``) changing nothing when it refuses."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest
from server_kit import (
    BOTH_STORES,
    Server,
    heartbeat,
    job,
    node,
    reopen,
    report,
    row_counts,
    submit,
    tenant,
)

from xpupool.server import job_lifecycle as lc
from xpupool.server.schemas.jobs import JobPhase as P
from xpupool.server.schemas.jobs import RetryCause, StopCause

STORES = BOTH_STORES  # its tests' server on SQLite and on PostgreSQL (conftest.py)

HOLDING = (P.ADMITTED, P.SCHEDULED, P.RUNNING)
FINAL = (P.SUCCEEDED, P.FAILED, P.CANCELLED, P.LOST)
C = StopCause
NO_RETRY = lc.RetryPolicy(frozenset())


def st(phase: P, **kw: object) -> lc.JobStatus:
    return lc.JobStatus(phase, **kw)  # type: ignore[arg-type]


# (status, event) -> (phase, stop, release, requeue)
LEGAL: list[tuple[lc.JobStatus | None, lc.Event, P, StopCause | None, bool, bool]] = [
    (None, lc.Submit(), P.PENDING, None, False, False),
    (st(P.PENDING), lc.Admit("q"), P.ADMITTED, None, False, False),
    (st(P.ADMITTED), lc.Schedule("n1"), P.SCHEDULED, None, False, False),
    (st(P.SCHEDULED), lc.Dispatch(1, "a1"), P.SCHEDULED, None, False, False),
    (st(P.RUNNING), lc.Dispatch(2, "a2"), P.RUNNING, None, False, False),
    (st(P.SCHEDULED), lc.Start("pid 1"), P.RUNNING, None, False, False),
    (st(P.ADMITTED), lc.Start("pid 1"), P.RUNNING, None, False, False),
    (st(P.SCHEDULED, stop=C.CANCELLED), lc.Start("pid"), P.RUNNING, C.CANCELLED, False, False),
    (st(P.PENDING), lc.Note("prio"), P.PENDING, None, False, False),
    (st(P.RUNNING), lc.Note("over memory"), P.RUNNING, None, False, False),
    # stops: pending, held but never handed out, handed out (stored, then waited for)
    (st(P.PENDING), lc.Stop(C.CANCELLED, "u"), P.CANCELLED, C.CANCELLED, False, False),
    (st(P.PENDING), lc.Stop(C.UNRUNNABLE, "nul"), P.FAILED, C.UNRUNNABLE, False, False),
    (st(P.SCHEDULED), lc.Stop(C.CANCELLED, "u"), P.CANCELLED, C.CANCELLED, True, False),
    (st(P.SCHEDULED), lc.Stop(C.PREEMPTED, "p"), P.PENDING, None, True, True),
    (st(P.RUNNING, may_run=True), lc.Stop(C.CANCELLED, "u"), P.RUNNING, C.CANCELLED, False, False),
    (st(P.RUNNING, may_run=True), lc.Stop(C.PREEMPTED, "p"), P.RUNNING, C.PREEMPTED, False, False),
    (
        st(P.RUNNING, may_run=True),
        lc.Stop(C.MAX_RUNTIME, "t"),
        P.RUNNING,
        C.MAX_RUNTIME,
        False,
        False,
    ),
    (st(P.RUNNING, may_run=True), lc.Stop(C.UNRUNNABLE, "x"), P.FAILED, C.UNRUNNABLE, True, False),
    (
        st(P.RUNNING, may_run=True, stop=C.PREEMPTED),
        lc.Stop(C.CANCELLED, "u"),
        P.RUNNING,
        C.CANCELLED,
        False,
        False,
    ),
    # the end of a run, per the cause its stop was for
    (st(P.RUNNING), lc.Ended(False, "ok"), P.SUCCEEDED, None, True, False),
    (
        st(P.RUNNING, policy=NO_RETRY),
        lc.Ended(True, "x", 3),
        P.FAILED,
        C.REPLICA_FAILED,
        True,
        False,
    ),
    (
        st(P.RUNNING, stop=C.CANCELLED),
        lc.Ended(True, "x", 143),
        P.CANCELLED,
        C.CANCELLED,
        True,
        False,
    ),
    (st(P.RUNNING, stop=C.PREEMPTED), lc.Ended(True, "x", 143), P.PENDING, None, True, True),
    (
        st(P.RUNNING, stop=C.MAX_RUNTIME),
        lc.Ended(True, "x", 143),
        P.FAILED,
        C.MAX_RUNTIME,
        True,
        False,
    ),
    # a lost node whose lease is over: requeued (the default), lost (no retry), cancelled when a
    # cancel was asked; its agent's word that the lease stopped a replica is as sure
    (st(P.RUNNING), lc.LeaseExpired("gone", 9, 9), P.PENDING, None, True, True),
    (st(P.RUNNING), lc.LeaseExpired("gone", reported=True), P.PENDING, None, True, True),
    (
        st(P.RUNNING, policy=NO_RETRY),
        lc.LeaseExpired("g", 9, 9),
        P.LOST,
        C.NODE_LOST,
        True,
        False,
    ),
    # a run reported after a restart is adopted: no new attempt, the phase stays
    (st(P.RUNNING), lc.Adopt("adopted"), P.RUNNING, None, False, False),
    (st(P.SCHEDULED), lc.Lost(C.SET_ASIDE, "bad row"), P.PENDING, None, True, True),
    (
        st(P.RUNNING, stop=C.CANCELLED),
        lc.LeaseExpired("g", 9, 9),
        P.CANCELLED,
        C.CANCELLED,
        True,
        False,
    ),
    # its site stopped answering (issue 51): unknown, devices kept, the stop kept; only the
    # site's word moves it on, a silence past the lease does not
    (st(P.RUNNING), lc.SiteUnreachable("s"), P.UNKNOWN, None, False, False),
    (st(P.SCHEDULED), lc.SiteUnreachable("s"), P.UNKNOWN, None, False, False),
    (
        st(P.RUNNING, stop=C.CANCELLED),
        lc.SiteUnreachable("s"),
        P.UNKNOWN,
        C.CANCELLED,
        False,
        False,
    ),
    (st(P.UNKNOWN), lc.LeaseExpired("silent", 9, 9), P.UNKNOWN, None, False, False),
    (st(P.UNKNOWN), lc.Reached("back"), P.RUNNING, None, False, False),
    (st(P.UNKNOWN), lc.Start("its site reports it"), P.RUNNING, None, False, False),
    (st(P.UNKNOWN), lc.Ended(False, "ok"), P.SUCCEEDED, None, True, False),
    (st(P.UNKNOWN), lc.LeaseExpired("g", reported=True), P.PENDING, None, True, True),
    (st(P.UNKNOWN, may_run=True), lc.Stop(C.CANCELLED, "u"), P.UNKNOWN, C.CANCELLED, False, False),
]


@pytest.mark.parametrize(("status", "event", "phase", "stop", "release", "requeue"), LEGAL)
def test_every_legal_transition(
    status: lc.JobStatus | None,
    event: lc.Event,
    phase: P,
    stop: StopCause | None,
    release: bool,
    requeue: bool,
) -> None:
    out = lc.transition(status, event)
    assert (out.phase, out.stop, out.release, out.requeue) == (phase, stop, release, requeue)


ILLEGAL: list[tuple[lc.JobStatus | None, lc.Event]] = [
    (None, lc.Admit("q")),
    (st(P.PENDING), lc.Submit()),
    (st(P.PENDING), lc.Schedule("n")),
    (st(P.PENDING), lc.Start("pid")),
    (st(P.PENDING), lc.Dispatch(1, "a")),
    (st(P.PENDING), lc.Stop(C.PREEMPTED, "p")),
    (st(P.PENDING), lc.Stop(C.MAX_RUNTIME, "t")),
    (st(P.PENDING), lc.Ended(False, "ok")),
    (st(P.PENDING), lc.LeaseExpired("g", 9, 9)),
    # a silent node's job keeps its devices until the lease on its replicas is surely over
    (st(P.RUNNING), lc.LeaseExpired("too soon", 5, 9)),
    (st(P.RUNNING), lc.Lost(C.NODE_LOST, "only through the lease")),
    (st(P.RUNNING, stop=C.CANCELLED), lc.Adopt("being stopped")),
    (st(P.SCHEDULED), lc.Admit("q")),
    (st(P.RUNNING), lc.Start("again")),
    (st(P.RUNNING, stop=C.CANCELLED), lc.Dispatch(2, "a")),
    (st(P.PENDING), lc.SiteUnreachable("s")),
    (st(P.RUNNING), lc.Reached("r")),
    *[(st(f), e) for f in FINAL for e in (lc.Stop(C.CANCELLED, "u"), lc.Note("x"), lc.Admit("q"))],
]


@pytest.mark.parametrize(("status", "event"), ILLEGAL)
def test_illegal_transitions_are_refused(status: lc.JobStatus | None, event: lc.Event) -> None:
    with pytest.raises(lc.IllegalTransition) as err:
        lc.transition(status, event)
    assert err.value.phase == (None if status is None else status.phase)


def test_a_second_stop_changes_nothing_unless_it_is_a_cancel() -> None:
    stopping = st(P.RUNNING, may_run=True, stop=C.MAX_RUNTIME, stop_reason="ran 2 s")
    out = lc.transition(stopping, lc.Stop(C.PREEMPTED, "p"))
    assert not out.changed and out.stop is C.MAX_RUNTIME


def test_retries_follow_the_policy_and_back_off() -> None:
    policy = lc.RetryPolicy(frozenset({RetryCause.EXIT_NONZERO}), 2, 1.0, 3.0)
    waits = []
    for used in range(2):
        out = lc.transition(st(P.RUNNING, retries=used, policy=policy), lc.Ended(True, "x", 1))
        assert out.requeue and out.retried
        waits.append(out.backoff_s)
    assert waits == [1.0, 2.0]
    capped = lc.transition(
        st(P.RUNNING, retries=2, policy=lc.RetryPolicy(policy.retry_on, 5, 1.0, 3.0)),
        lc.Ended(True, "x", 1),
    )
    assert capped.backoff_s == 3.0
    last = lc.transition(st(P.RUNNING, retries=2, policy=policy), lc.Ended(True, "x", 1))
    assert last.phase is P.FAILED and last.exit_code == 1 and "no retries left" in last.reason
    # a preemption is retried at once, and not when the policy leaves it out
    assert lc.transition(st(P.SCHEDULED), lc.Stop(C.PREEMPTED, "p")).backoff_s == 0
    out = lc.transition(st(P.SCHEDULED, policy=policy), lc.Stop(C.PREEMPTED, "p"))
    assert out.phase is P.FAILED and out.stop is C.PREEMPTED


SERVER = Path(__file__).resolve().parents[3] / "src" / "xpupool" / "server"


def test_only_the_lifecycle_moves_a_job() -> None:
    """No module writes a job's phase itself: the row's ``state`` is written by submission's
    insert (from the lifecycle's Submit) and by ``ControlPlane.apply`` alone."""
    offenders = []
    for path in sorted(SERVER.rglob("*.py")):
        text = path.read_text()
        rel = path.relative_to(SERVER).as_posix()
        for pattern in (r"\bset_state\(", r"\badd_event\(", r"\.requeue\(", r"\bJobState\."):
            if re.search(pattern, text):
                offenders.append(f"{rel}: {pattern}")
        if rel != "plane/control.py" and re.search(r"values\([^)]*\bstate=", text):
            offenders.append(f"{rel}: writes a state column")
        if rel not in ("plane/control.py", "job_lifecycle.py") and re.search(r"\.stop = ", text):
            offenders.append(f"{rel}: sets a held job's stop")
    assert offenders == []


@pytest.mark.slow
def test_a_refused_move_changes_nothing_stored(server: Server) -> None:
    """``ControlPlane.apply`` refuses before it writes: the row, its events and memory stay."""
    node(server, "n1")
    j = submit(server, tenant(server, "a"), "A100")["id"]
    server.schedule()
    heartbeat(server, "n1")
    heartbeat(server, "n1", [report(j, 0, "succeeded", 0)])
    before, shown = row_counts(server), job(server, j)
    for event in (lc.Stop(C.CANCELLED, "late"), lc.Start("again"), lc.Admit("q")):
        with pytest.raises(lc.IllegalTransition), server.plane.write() as conn:
            server.plane.apply(conn, j, event)
    assert row_counts(server) == before and job(server, j) == shown
    r = server.client.post(f"/v1/jobs/{j}/cancel", headers=server.admin)
    assert r.status_code == 409 and row_counts(server) == before


@pytest.mark.parametrize("limits", ["limits: none asked", "limits: cgroup v2 pids=16384"])
@pytest.mark.slow
def test_a_cancel_racing_the_start_report_ends_cancelled_by_the_cancel(
    server: Server, limits: str
) -> None:
    """Issue 43 item 15: the cancel is stored while the agent starts the replica; its first
    report (running, with the limits that applied) arrives after the cancel, then the stop.
    The job ends cancelled with the cancel's reason, not the start's or the limits' text, and
    keeps it across a restart of the server while it is still being stopped."""
    node(server, "n1")
    j = submit(server, tenant(server, "a"), "A100")["id"]
    server.schedule()
    heartbeat(server, "n1")  # handed out: the agent starts it
    r = server.client.post(f"/v1/jobs/{j}/cancel", headers=server.admin)
    assert r.status_code == 200 and r.json()["state"] == "scheduled"
    started = {**report(j, 0, "running"), "pid": 4242, "limits": limits}
    reply = heartbeat(server, "n1", [started])
    assert reply["stop"] == [[j, 0]]
    heartbeat(server, "n1", [started])  # reported again before the stop took effect
    got = job(server, j)
    assert got["state"] == "running" and got["stop_cause"] == "cancelled"
    assert got["reason"] == "stopping: cancelled by user"
    again = reopen(server)  # what the stop is for is read back from the store
    with again.client:
        heartbeat(again, "n1", [{**report(j, 0, "stopped", 143), "limits": limits}])
        got = job(again, j)
    again.plane.db.dispose()
    assert got["state"] == "cancelled" and got["stop_cause"] == "cancelled"
    assert got["reason"] == "cancelled by user"
    events = [e["reason"] for e in got["events"]]
    assert f"replica 0: {limits}" in events and any("pid 4242" in e for e in events)


@pytest.mark.slow
def test_a_cancel_before_any_start_report_ends_cancelled_by_the_cancel(server: Server) -> None:
    """The other order of the race: the stop took effect before the agent reported the start,
    so its first report is the final one, limits and all."""
    node(server, "n1")
    j = submit(server, tenant(server, "a"), "A100")["id"]
    server.schedule()
    heartbeat(server, "n1")
    assert server.client.post(f"/v1/jobs/{j}/cancel", headers=server.admin).status_code == 200
    stopped = {**report(j, 0, "stopped", 143), "pid": 4242, "limits": "limits: none asked"}
    heartbeat(server, "n1", [stopped])
    got = job(server, j)
    assert (got["state"], got["reason"]) == ("cancelled", "cancelled by user")


def test_a_start_or_a_note_keeps_the_stop_under_way() -> None:
    stopping = st(P.SCHEDULED, stop=C.CANCELLED, stop_reason="cancelled by user", may_run=True)
    for event in (lc.Start("started on n1 (pid 7)"), lc.Note("replica 0: limits: none asked")):
        out = lc.transition(stopping, event)
        assert out.reason == event.reason  # the event's own text, for its event row
        assert (out.stop, out.stop_reason) == (C.CANCELLED, "cancelled by user")
        assert out.job_reason == "stopping: cancelled by user"
    ended = lc.transition(replace(stopping, phase=P.RUNNING), lc.Ended(True, "exited with 143"))
    assert (ended.phase, ended.reason) == (P.CANCELLED, "cancelled by user")
