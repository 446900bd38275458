"""Consolidation in quiet periods on the plane (issue 54 part 3), on both stores: two 4-card
nodes, three pinned jobs and a finished one on n1 leave one card there, a movable one-card job
runs on n2; a 4-card job, a shape the plane has seen, fits nowhere. With nothing waiting,
``xpupool up --defrag --consolidate`` (``consolidation_moves``) moves the one-card job onto n1
through the one preemption path, its event naming what the move frees, and places it on the card
kept for it; n2 is then whole for the next 4-card job."""

from __future__ import annotations

from typing import Any

from server_kit import (
    BOTH_STORES,
    Server,
    heartbeat,
    job,
    node,
    reopened_defrag,
    report,
    submit,
    tenant,
)

from xpupool.engine.cycle.consolidate import ConsolidationRule
from xpupool.engine.cycle.defrag import DisruptionBudget
from xpupool.server.plane import consolidation_moves, defrag_moves

STORES = BOTH_STORES


def cards(view: dict[str, Any]) -> list[str]:
    return [d["uuid"] for a in view["assignments"] for d in a["devices"]]


def nodes_of(view: dict[str, Any]) -> set[str]:
    return {a["node"] for a in view["assignments"]}


def scattered(server: Server, budget: DisruptionBudget) -> tuple[str, int]:
    """The layout of the module docstring: (tenant token, the movable job on n2)."""
    defrag_moves.use(server.plane, budget, 1.0)
    consolidation_moves.use(server.plane, ConsolidationRule(quiet_s=0.0, every_s=0.0))
    node(server, "n1", count=4)
    node(server, "n2", count=4)
    a = tenant(server, "a")
    large = submit(server, a, "A100:4")["id"]  # the shape the plane learns to expect
    server.schedule()
    [where] = nodes_of(job(server, large))
    heartbeat(server, where, [report(large, 0, "succeeded", 0)])
    pinned = [submit(server, a, f"A100:1 uuid=n1-gpu{i}")["id"] for i in range(4)]
    server.schedule()
    movable = submit(server, a, "A100:1 checkpoint-signal=USR1")["id"]
    server.schedule()
    assert nodes_of(job(server, movable)) == {"n2"}  # n1 was full
    heartbeat(server, "n1", [report(j, 0, "running") for j in pinned])
    heartbeat(server, "n2", [report(movable, 0, "running")])
    heartbeat(server, "n1", [report(pinned[3], 0, "succeeded", 0)])  # one card free on n1
    return a, movable


def test_a_quiet_plane_frees_a_node_for_the_large_shape_it_has_seen(server: Server) -> None:
    a, movable = scattered(server, DisruptionBudget())
    assert consolidation_moves.step(server.plane) == 1
    moved = job(server, movable)
    assert moved["stop_cause"] == "preempted"
    assert moved["reason"].startswith("stopping: consolidating: freeing node n2 for 4-card jobs"), (
        moved["reason"]
    )
    said = [e["reason"] for e in moved["events"]]
    assert any("consolidating: freeing node n2 for 4-card jobs" in r for r in said), said
    heartbeat(server, "n2", [report(movable, 0, "stopped")])
    assert job(server, movable)["state"] == "pending"  # requeued: nothing lost
    server.schedule()
    again = job(server, movable)
    assert again["state"] == "scheduled", again["reason"]
    assert cards(again) == ["n1-gpu3"]  # the card kept for it
    big = submit(server, a, "A100:4")["id"]
    server.schedule()
    assert nodes_of(job(server, big)) == {"n2"}


def test_nothing_moves_while_a_job_waits_or_past_the_budget(server: Server) -> None:
    a, movable = scattered(server, DisruptionBudget(moves_per_tenant_hour=0))
    assert consolidation_moves.step(server.plane) == 0  # the budget allows no move
    assert job(server, movable)["stop_cause"] is None
    mover = server.plane.defrag
    assert mover is not None
    mover.ledger.budget = DisruptionBudget()  # moves allowed again
    on_n1 = ",".join(f"n1-gpu{i}" for i in range(4))
    waiting = submit(server, a, f"A100:2 uuid={on_n1}")["id"]  # n1 has one card free
    server.schedule()
    assert job(server, waiting)["state"] == "pending"
    assert consolidation_moves.step(server.plane) == 0
    assert job(server, movable)["stop_cause"] is None


def test_a_restarted_plane_keeps_the_consolidation_moves_in_its_budget(server: Server) -> None:
    _, movable = scattered(server, DisruptionBudget())
    assert consolidation_moves.step(server.plane) == 1
    assert job(server, movable)["stop_cause"] == "preempted"
    with reopened_defrag(server, DisruptionBudget(moves_per_tenant_hour=1)) as mover:
        assert mover.ledger.allowance(server.clock()).moves_for("a") == 0
        assert mover.moved_for == {}  # moved for no pending job: it yields to none
