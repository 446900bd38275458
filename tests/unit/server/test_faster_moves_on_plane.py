"""Moving a running job to faster cards on the plane (issue 55), through the API on a real store
(SQLite and PostgreSQL): a job declaring ``speed=A100:1.0,T4:0.3`` and a checkpoint signal runs
on the T4 while the A100 is busy; the A100 frees. With ``xpupool up --move-faster``
(``faster_moves.use``) the pass after it stops the job as a preemption does (its stop stored, the
reason naming both cards), the A100 is kept for it while it stops (a job asking for it waits),
and once its replica is gone it is placed again on the A100."""

from __future__ import annotations

from typing import Any

from server_kit import (
    BOTH_STORES,
    Server,
    heartbeat,
    job,
    node,
    reopen,
    report,
    submit,
    tenant,
)

from xpupool.engine.cycle.faster_cards import FasterRule
from xpupool.server.plane import faster_moves

STORES = BOTH_STORES
MOVER = "any speed=A100:1.0,T4:0.3 checkpoint-signal=USR1"


def cards(view: dict[str, Any]) -> list[str]:
    return [d["uuid"] for a in view["assignments"] for d in a["devices"]]


def on_the_t4(server: Server) -> tuple[str, int, int]:
    """Node fast (an A100, busy), node slow (a T4) running the job that may move; (tenant token,
    the job on the A100, the job on the T4)."""
    node(server, "fast", count=1)
    node(server, "slow", count=1, model="T4", memory_mib=15360)
    a = tenant(server, "a")
    busy = submit(server, a, "A100:1")["id"]
    server.schedule()
    mover = submit(server, a, MOVER, max_runtime_s=36000)["id"]
    server.schedule()
    heartbeat(server, "fast", [report(busy, 0, "running")])
    heartbeat(server, "slow", [report(mover, 0, "running")])
    assert cards(job(server, mover)) == ["slow-gpu0"]
    server.clock.advance(600)
    return a, busy, mover


def test_a_job_stays_on_the_slow_card_without_the_option(server: Server) -> None:
    _, busy, mover = on_the_t4(server)
    heartbeat(server, "fast", [report(busy, 0, "succeeded", 0)])
    server.schedule()
    assert job(server, mover)["stop_cause"] is None  # nothing moves: the option is off


def test_the_plane_moves_the_job_to_the_a100_once_it_frees(server: Server) -> None:
    faster_moves.use(server.plane, FasterRule())
    a, busy, mover = on_the_t4(server)
    server.schedule()
    assert job(server, mover)["stop_cause"] is None  # no faster card free yet
    heartbeat(server, "fast", [report(busy, 0, "succeeded", 0)])
    server.schedule()
    moved = job(server, mover)
    assert moved["stop_cause"] == "preempted", moved
    assert "moved to faster cards (NVIDIA A100-SXM4-80GB, 3.33x)" in moved["reason"], moved[
        "reason"
    ]
    assert "A100 1x against T4 0.3x" in moved["reason"], moved["reason"]
    other = submit(server, a, "A100:1")["id"]  # the A100 is kept for the moved job
    server.schedule()
    assert job(server, other)["state"] == "pending"
    heartbeat(server, "slow", [report(mover, 0, "stopped")])
    assert job(server, mover)["state"] == "pending"  # requeued: nothing lost
    server.schedule()
    again = job(server, mover)
    assert again["state"] == "scheduled", again["reason"]
    assert cards(again) == ["fast-gpu0"]
    assert job(server, other)["state"] == "pending"
    said = [e["reason"] for e in again["events"]]
    assert any("moved to faster cards" in r for r in said), said


def test_a_job_without_a_max_runtime_is_not_moved(server: Server) -> None:
    """No ``max_runtime`` and no finished job of its shape: the plane knows no end of it, so no
    gain to weigh."""
    faster_moves.use(server.plane, FasterRule())
    node(server, "fast", count=1)
    node(server, "slow", count=1, model="T4", memory_mib=15360)
    a = tenant(server, "a")
    busy = submit(server, a, "A100:1")["id"]
    server.schedule()
    mover = submit(server, a, MOVER)["id"]
    server.schedule()
    heartbeat(server, "fast", [report(busy, 0, "running")])
    heartbeat(server, "slow", [report(mover, 0, "running")])
    server.clock.advance(600)
    heartbeat(server, "fast", [report(busy, 0, "succeeded", 0)])
    server.schedule()
    assert job(server, mover)["stop_cause"] is None


def test_the_kept_a100_goes_back_when_the_moved_job_is_cancelled(server: Server) -> None:
    """A moved job cancelled while it stops is not requeued: nothing stays held for it."""
    faster_moves.use(server.plane, FasterRule())
    a, busy, mover = on_the_t4(server)
    heartbeat(server, "fast", [report(busy, 0, "succeeded", 0)])
    server.schedule()
    assert job(server, mover)["stop_cause"] == "preempted"
    r = server.client.post(f"/v1/jobs/{mover}/cancel", headers=server.as_(a))
    assert r.status_code < 300, r.text
    heartbeat(server, "slow", [report(mover, 0, "stopped")])
    assert job(server, mover)["state"] == "cancelled"
    other = submit(server, a, "A100:1")["id"]
    server.schedule()  # the step after the pass gives the kept card back
    server.schedule()
    got = job(server, other)
    assert got["state"] == "scheduled", got["reason"]
    assert cards(got) == ["fast-gpu0"]


def test_a_job_moves_by_speeds_measured_after_it_was_placed(server: Server) -> None:
    """No ``speed=``, and nothing measured when it was placed: the rates its tenant's jobs of
    its kind report since (itself on the T4, the A100's job) are the speeds the rule weighs
    (throughput_knowledge.py)."""
    faster_moves.use(server.plane, FasterRule())
    node(server, "fast", count=1)
    node(server, "slow", count=1, model="T4", memory_mib=15360)
    a = tenant(server, "a")
    busy = submit(server, a, "A100:1 kind=resnet")["id"]
    server.schedule()
    mover = submit(server, a, "any kind=resnet checkpoint-signal=USR1", max_runtime_s=36000)["id"]
    server.schedule()
    heartbeat(server, "fast", [report(busy, 0, "running")])
    heartbeat(server, "slow", [report(mover, 0, "running")])
    assert cards(job(server, mover)) == ["slow-gpu0"]
    for job_id, rate in ((busy, 100.0), (mover, 25.0)):
        r = server.client.post(
            f"/v1/jobs/{job_id}/progress", json={"rate": rate}, headers=server.as_(a)
        )
        assert r.status_code == 200, r.text
    server.clock.advance(600)
    heartbeat(server, "fast", [report(busy, 0, "succeeded", 0)])
    server.schedule()
    moved = job(server, mover)
    assert moved["stop_cause"] == "preempted", moved["reason"]
    assert "A100 1x against T4 0.25x" in moved["reason"], moved["reason"]


def learned(server: Server, learned_s: float) -> str:
    """With moves on, over nodes fast (an A100) and slow (a T4), a job of the mover's shape ran
    ``learned_s`` to success. Returns its tenant's token."""
    faster_moves.use(server.plane, FasterRule())
    node(server, "fast", count=1)
    node(server, "slow", count=1, model="T4", memory_mib=15360)
    a = tenant(server, "a")
    done = submit(server, a, MOVER)["id"]
    server.schedule()
    where = cards(job(server, done))[0].split("-")[0]
    heartbeat(server, where, [report(done, 0, "running")])
    server.clock.advance(learned_s)
    heartbeat(server, where, [report(done, 0, "succeeded", 0)])
    return a


def mover_on_the_t4(server: Server, a: str, ran_s: float) -> int:
    """The A100 is busy and the mover, without ``max_runtime``, runs on the T4 for ``ran_s``
    before the A100 frees. Returns the mover."""
    busy = submit(server, a, "A100:1")["id"]
    server.schedule()
    mover = submit(server, a, MOVER)["id"]
    server.schedule()
    heartbeat(server, "fast", [report(busy, 0, "running")])
    heartbeat(server, "slow", [report(mover, 0, "running")])
    assert cards(job(server, mover)) == ["slow-gpu0"]
    server.clock.advance(ran_s)
    heartbeat(server, "fast", [report(busy, 0, "succeeded", 0)])
    server.schedule()
    return int(mover)


def learned_then_on_the_t4(server: Server, learned_s: float, ran_s: float) -> int:
    """:func:`learned`, then :func:`mover_on_the_t4` on the same plane. Returns the mover."""
    return mover_on_the_t4(server, learned(server, learned_s), ran_s)


def test_a_job_without_a_max_runtime_moves_by_the_learned_run_time_of_its_shape(
    server: Server,
) -> None:
    """No ``max_runtime``, but a job of its shape ran 10 h to success: the wait estimator's mean
    run time of the shape (``site_choice.RunTimes``) less what it has run is the remaining run
    the rule weighs, and its event says so."""
    moved = job(server, learned_then_on_the_t4(server, 36000, 600))
    assert moved["stop_cause"] == "preempted", moved["reason"]
    assert "remaining run estimated: mean of 1 run of its shape" in moved["reason"], moved["reason"]


def test_a_job_without_a_max_runtime_is_not_moved_past_its_learned_run_time(
    server: Server,
) -> None:
    """Its shape's mean run time is 1 h and it has run 2 h: nothing left to gain, not moved."""
    assert job(server, learned_then_on_the_t4(server, 3600, 7200))["stop_cause"] is None


def test_a_restarted_plane_moves_a_job_by_the_run_time_learned_before_the_restart(
    server: Server,
) -> None:
    """A job of the mover's shape ran 10 h to success, then the plane restarted (its moves
    turned on after it opened, as ``xpupool up --move-faster`` does): it read that run back
    from the store (``plane/learned_runs.py``) and moves the mover by it."""
    a = learned(server, 36000)
    restarted = reopen(server)
    try:
        with restarted.client:
            faster_moves.use(restarted.plane, FasterRule())
            moved = job(restarted, mover_on_the_t4(restarted, a, 600))
            assert moved["stop_cause"] == "preempted", moved["reason"]
            said = "remaining run estimated: mean of 1 run of its shape"
            assert said in moved["reason"], moved["reason"]
    finally:
        restarted.plane.db.dispose()


def test_a_restart_while_the_moved_job_stops_forgets_the_kept_a100_and_leaks_nothing(
    server: Server,
) -> None:
    """The cards kept for a moved job live in the plane's memory only: a plane restarted while
    it stops (``xpupool up --move-faster`` again) holds its old T4 from the store until its
    replica is gone, requeues it then and places it as any other job; the A100 is not held for
    it, and once placed no card stays held by anyone else."""
    faster_moves.use(server.plane, FasterRule())
    a, busy, mover = on_the_t4(server)
    heartbeat(server, "fast", [report(busy, 0, "succeeded", 0)])
    server.schedule()
    assert job(server, mover)["stop_cause"] == "preempted"
    restarted = reopen(server)
    try:
        with restarted.client:
            faster_moves.use(restarted.plane, FasterRule())
            assert cards(job(restarted, mover)) == ["slow-gpu0"]  # its processes run there
            other = submit(restarted, a, "A100:1")["id"]  # nothing is kept for the mover now
            restarted.schedule()
            got = job(restarted, other)
            assert got["state"] == "scheduled", got["reason"]
            assert cards(got) == ["fast-gpu0"]
            heartbeat(restarted, "slow", [report(mover, 0, "stopped")])
            assert job(restarted, mover)["state"] == "pending"  # requeued
            restarted.schedule()
            again = job(restarted, mover)
            assert again["state"] == "scheduled", again["reason"]
            assert cards(again) == ["slow-gpu0"]  # the one card free: placed as any other
            heartbeat(restarted, "fast", [report(other, 0, "succeeded", 0)])
            heartbeat(restarted, "slow", [report(mover, 0, "succeeded", 0)])
            last = submit(restarted, a, "A100:1")["id"]
            spare = submit(restarted, a, "T4:1")["id"]
            restarted.schedule()
            for made, card in ((last, "fast-gpu0"), (spare, "slow-gpu0")):
                placed = job(restarted, made)
                assert placed["state"] == "scheduled", placed["reason"]  # nothing leaked
                assert cards(placed) == [card]
    finally:
        restarted.plane.db.dispose()


def test_a_restart_after_the_moved_job_is_requeued_places_it_as_any_other(
    server: Server,
) -> None:
    """Stopped and requeued, the plane restarts before the pass that would place it on the kept
    A100: the restarted plane places it where a pending job goes, and the other card stays free
    for the next job (the kept A100 is not held twice, nor for no one)."""
    faster_moves.use(server.plane, FasterRule())
    a, busy, mover = on_the_t4(server)
    heartbeat(server, "fast", [report(busy, 0, "succeeded", 0)])
    server.schedule()
    heartbeat(server, "slow", [report(mover, 0, "stopped")])
    assert job(server, mover)["state"] == "pending"
    restarted = reopen(server)
    try:
        with restarted.client:
            faster_moves.use(restarted.plane, FasterRule())
            restarted.schedule()
            again = job(restarted, mover)
            assert again["state"] == "scheduled", again["reason"]
            taken = cards(again)
            assert len(taken) == 1
            free = "slow-gpu0" if taken == ["fast-gpu0"] else "fast-gpu0"
            other = submit(restarted, a, "T4:1" if free == "slow-gpu0" else "A100:1")["id"]
            restarted.schedule()
            got = job(restarted, other)
            assert got["state"] == "scheduled", got["reason"]
            assert cards(got) == [free]
    finally:
        restarted.plane.db.dispose()
