"""Allocation ids never repeat for a pool (issue 43, item 3): not after a node registers (the
engine is rebuilt), not after a restart (it is rebuilt from the store), and the mark above them
is stored in the transaction that stores the allocation. Before, a rebuilt engine numbered from
1 again: an agent that had finished allocation 1 skipped the next job's allocation 1, and that
job sat ``scheduled`` for ever holding its cards. An agent that still gets work it cannot run
says why, and the job fails with that reason."""

from __future__ import annotations

from typing import Any

from server_kit import (
    BOTH_STORES,
    L20,
    Server,
    heartbeat,
    job,
    node,
    reopen,
    report,
    submit,
    tenant,
)
from sqlalchemy import select

from xpupool.server.storage.pool import pool as t_pool

STORES = BOTH_STORES  # its tests' server on SQLite and on PostgreSQL (conftest.py)


def _placed_on_n1(srv: Server, token: str) -> tuple[int, int]:
    """Submit an A100 job, place it, and return (job id, the allocation id n1 is handed)."""
    j = submit(srv, token, "A100:1")
    assert srv.schedule() == 1, job(srv, j["id"])["reason"]
    (work,) = [w for w in heartbeat(srv, "n1")["run"] if w["job_id"] == j["id"]]
    return j["id"], int(work["assignment"]["allocation_id"])


def _finish(srv: Server, job_id: int) -> None:
    heartbeat(srv, "n1", [report(job_id, 0, "succeeded", 0)])
    assert job(srv, job_id)["state"] == "succeeded"


def _stored_mark(srv: Server) -> int:
    with srv.plane.db.connect() as conn:
        return int(conn.execute(select(t_pool.c.first_allocation_id)).scalar_one())


def test_a_registration_does_not_hand_out_a_finished_allocations_id(server: Server) -> None:
    node(server, "n1", count=1)
    user = tenant(server, "a")
    first_job, first = _placed_on_n1(server, user)
    _finish(server, first_job)
    node(server, "n2", count=1, model=L20)  # a new node: the engine is rebuilt
    _, second = _placed_on_n1(server, user)
    assert second > first


def test_a_restart_does_not_hand_out_a_finished_allocations_id(server: Server) -> None:
    node(server, "n1", count=1)
    user = tenant(server, "a")
    first_job, first = _placed_on_n1(server, user)
    _finish(server, first_job)
    again = reopen(server)
    with again.client:
        heartbeat(again, "n1")  # the node is back after the restart
        _, second = _placed_on_n1(again, user)
        assert second > first
    again.plane.db.dispose()


def test_the_mark_is_stored_with_the_allocation(server: Server) -> None:
    node(server, "n1", count=2)
    user = tenant(server, "a")
    _, first = _placed_on_n1(server, user)
    assert _stored_mark(server) == first + 1  # in the same transaction as the allocation row
    _, second = _placed_on_n1(server, user)
    assert _stored_mark(server) == second + 1


def test_work_an_agent_cannot_run_fails_the_job_with_the_agents_reason(server: Server) -> None:
    node(server, "n1", count=1)
    user = tenant(server, "a")
    job_id, alloc = _placed_on_n1(server, user)
    why = f"allocation {alloc} already ran on n1 (job 99 replica 0): not started"
    refused: dict[str, Any] = {**report(job_id, 0, "failed"), "reason": why}
    heartbeat(server, "n1", [refused])
    got = job(server, job_id)
    assert got["state"] == "failed"
    assert got["reason"] == f"replica 0: {why}"  # not "exited with 0": it never ran
    assert not any("started on" in e["reason"] for e in got["events"])
