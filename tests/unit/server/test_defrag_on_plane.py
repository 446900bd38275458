"""Online defragmentation on the plane (issue 54 part 3), through the API on a real store: two
half-card jobs scattered over the two cards of a node, one of them declaring a checkpoint signal;
a whole-card job then fits nowhere. With ``xpupool up --defrag`` (``defrag_moves.use``) the
movable job is moved as a preemption is (its stop stored, requeued once its replica is gone),
both jobs' events say so, the whole-card job takes the freed card and the moved job runs again
beside the other share. ``GET /v1/defrag/plan`` shows that plan and changes nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from server_kit import (
    Server,
    heartbeat,
    job,
    node,
    reopen,
    reopened_defrag,
    report,
    row_counts,
    submit,
    tenant,
)

from xpupool.cli import main
from xpupool.engine.cycle.defrag import DisruptionBudget
from xpupool.server.plane import defrag_moves

SHARE = "A100:1 mem=40Gi cores=50% device-policy=spread"  # the two shares land apart


def cards(view: dict[str, Any]) -> list[str]:
    return [d["uuid"] for a in view["assignments"] for d in a["devices"]]


def scattered(server: Server) -> tuple[str, int, int]:
    """Node n1 (two A100s), a share on each card, both running; (tenant token, the share that
    cannot move, the share that can)."""
    node(server, "n1", count=2)
    a = tenant(server, "a")
    fixed = submit(server, a, SHARE)["id"]
    server.schedule()
    movable = submit(server, a, f"{SHARE} checkpoint-signal=USR1")["id"]
    server.schedule()
    heartbeat(server, "n1", [report(fixed, 0, "running"), report(movable, 0, "running")])
    assert job(server, movable)["state"] == "running"
    assert sorted(cards(job(server, fixed)) + cards(job(server, movable))) == [
        "n1-gpu0",
        "n1-gpu1",
    ]
    return a, fixed, movable


def test_a_whole_card_job_waits_without_defrag(server: Server) -> None:
    a, _, movable = scattered(server)
    whole = submit(server, a, "A100:1")["id"]
    server.schedule()
    assert job(server, whole)["state"] == "pending"
    assert job(server, movable)["stop_cause"] is None  # nothing moves: the option is off


def test_defrag_moves_the_movable_share_and_the_whole_card_job_runs(server: Server) -> None:
    defrag_moves.use(server.plane, DisruptionBudget(), 1.0)
    a, fixed, movable = scattered(server)
    left = cards(job(server, movable))
    whole = submit(server, a, "A100:1")["id"]
    server.schedule()
    got = job(server, whole)
    assert got["state"] == "pending"
    assert f"moving job(s) [{movable}] to defragment" in got["reason"], got["reason"]
    said = [e["reason"] for e in got["events"]]
    assert any(f"moving job(s) [{movable}] to defragment" in r for r in said), said
    moved = job(server, movable)
    assert moved["stop_cause"] == "preempted"
    assert moved["reason"].startswith(
        f"stopping: moved to defragment: checkpointed, stopped and requeued so that job {whole}"
    ), moved["reason"]
    assert job(server, fixed)["stop_cause"] is None
    heartbeat(server, "n1", [report(fixed, 0, "running"), report(movable, 0, "stopped")])
    assert job(server, movable)["state"] == "pending"  # requeued: nothing lost
    server.schedule()
    assert job(server, whole)["state"] == "scheduled"
    assert cards(job(server, whole)) == left  # the card the move freed
    assert job(server, movable)["state"] == "pending"  # it let the job it moved for go first
    server.schedule()
    again = job(server, movable)
    assert again["state"] == "scheduled", again["reason"]
    assert cards(again) == cards(job(server, fixed))  # beside the share that stayed
    assert again["retries"] == 1


def test_the_budget_bounds_the_moves(server: Server) -> None:
    defrag_moves.use(server.plane, DisruptionBudget(moves_per_tenant_hour=0), 1.0)
    a, _, movable = scattered(server)
    whole = submit(server, a, "A100:1")["id"]
    server.schedule()
    assert job(server, whole)["state"] == "pending"
    assert job(server, movable)["stop_cause"] is None


def test_a_job_without_a_retry_after_preemption_is_not_moved(server: Server) -> None:
    defrag_moves.use(server.plane, DisruptionBudget(), 1.0)
    node(server, "n1", count=2)
    a = tenant(server, "a")
    fixed = submit(server, a, SHARE)["id"]
    server.schedule()
    body = {"spec": f"{SHARE} checkpoint-signal=USR1", "retry_on": ["node_lost"]}
    kept = submit(server, a, **body)["id"]
    server.schedule()
    heartbeat(server, "n1", [report(fixed, 0, "running"), report(kept, 0, "running")])
    whole = submit(server, a, "A100:1")["id"]
    server.schedule()
    assert job(server, whole)["state"] == "pending"
    assert job(server, kept)["stop_cause"] is None  # a move would have failed it


def test_a_guaranteed_job_is_never_moved(server: Server) -> None:
    # issue 54 part 5: a guaranteed job's class promises it is not stopped for others, and a
    # move is a stop; the one check (``HeldJob.movable``) covers defragmentation, consolidation
    # and moves to faster cards, and a restarted plane reads it back the same
    defrag_moves.use(server.plane, DisruptionBudget(), 1.0)
    node(server, "n1", count=2)
    a = tenant(server, "a")
    fixed = submit(server, a, SHARE)["id"]
    server.schedule()
    kept = submit(server, a, f"{SHARE} checkpoint-signal=USR1 qos=guaranteed")["id"]
    server.schedule()
    heartbeat(server, "n1", [report(fixed, 0, "running"), report(kept, 0, "running")])
    assert server.plane.held_jobs[kept].movable is None
    whole = submit(server, a, "A100:1")["id"]
    server.schedule()
    assert job(server, whole)["state"] == "pending"
    assert job(server, kept)["stop_cause"] is None
    assert server.client.get("/v1/defrag/plan", headers=server.admin).json()["plans"] == []
    again = reopen(server)
    try:
        with again.client:
            assert again.plane.held_jobs[kept].movable is None
    finally:
        again.plane.db.dispose()


def test_the_dry_run_shows_the_plan_and_changes_nothing(server: Server) -> None:
    a, fixed, movable = scattered(server)
    left = cards(job(server, movable))
    whole = submit(server, a, "A100:1")["id"]
    server.schedule()
    assert server.client.get("/v1/defrag/plan", headers=server.as_(a)).status_code == 403
    doc = server.client.app.openapi()  # type: ignore[attr-defined]
    answer = doc["paths"]["/v1/defrag/plan"]["get"]["responses"]["200"]["content"]
    assert answer["application/json"]["schema"]["$ref"].endswith("/DefragPlanView")
    before = row_counts(server), [job(server, i) for i in (fixed, movable, whole)]
    r = server.client.get("/v1/defrag/plan", headers=server.admin)
    assert r.status_code == 200, r.text
    plan = r.json()
    assert plan["enabled"] is False
    [item] = plan["plans"]
    assert item["job"] == whole and item["tenant"] == "a"
    [move] = item["moves"]
    assert move["job"] == movable and move["tenant"] == "a"
    assert move["holds"] == [{"node": "n1", "cards": left}]
    assert move["gpu_hours_lost"] >= 0.0
    assert item["frees"] == [{"node": "n1", "cards": left}]
    assert (row_counts(server), [job(server, i) for i in (fixed, movable, whole)]) == before
    assert job(server, movable)["state"] == "running"


def test_a_restarted_plane_keeps_the_moves_in_its_budget(server: Server) -> None:
    defrag_moves.use(server.plane, DisruptionBudget(), 1.0)
    a, _, movable = scattered(server)
    whole = submit(server, a, "A100:1")["id"]
    server.schedule()
    assert job(server, movable)["stop_cause"] == "preempted"
    with reopened_defrag(server, DisruptionBudget(moves_per_tenant_hour=1)) as mover:
        assert mover.ledger.allowance(server.clock()).moves_for("a") == 0
        assert mover.moved_for == {movable: whole}


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--defrag-moves-per-hour", "3"], "--defrag-moves-per-hour"),  # without --defrag
        (["--defrag", "--defrag-moves-per-hour", "x"], "--defrag-moves-per-hour"),
        (["--defrag", "--defrag-lost-gpu-hours", "nan"], "--defrag-lost-gpu-hours"),
        (["--defrag", "--defrag-lost-gpu-hours", "-1"], "--defrag-lost-gpu-hours"),
        (["--defrag", "--defrag-min-cards", "inf"], "--defrag-min-cards"),
        # moves to faster cards (faster_moves.py): the options simulate has too
        (["--move-faster-gain", "1h"], "--move-faster-gain"),  # without --move-faster
        (["--move-faster", "--move-faster-gain", "soon"], "--move-faster-gain"),
        (["--move-faster", "--move-faster-restart", "x"], "--move-faster-restart"),
        (["--move-faster", "--move-faster-speedup", "1"], "--move-faster-speedup"),
        # consolidation in quiet periods (consolidation_moves.py): within --defrag's budget
        (["--consolidate"], "--consolidate"),
        (["--defrag", "--consolidate", "--consolidate-quiet", "soon"], "--consolidate-quiet"),
        (["--defrag", "--consolidate-quiet", "5m"], "--consolidate-quiet"),
        (["--defrag", "--consolidate", "--consolidate-every", "often"], "--consolidate-every"),
        (["--defrag", "--consolidate-every", "5s"], "--consolidate-every"),
    ],
)
def test_up_refuses_a_bad_defrag_or_move_option_naming_it(
    args: list[str], flag: str, tmp_path: Path
) -> None:
    result = CliRunner().invoke(main, ["up", "--data", str(tmp_path), "--no-agent", *args])
    assert result.exit_code == 2, result.output
    assert flag in result.output
    assert not any(tmp_path.iterdir())  # refused before anything was written
