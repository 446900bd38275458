"""Measured speeds (issue 55): a running job's rate, through its agent's report or the API,
becomes the measured throughput of its kind on its card model, stored (it survives a restart),
per tenant, and given as speeds to the tenant's later jobs of that kind that declare none."""

from __future__ import annotations

from typing import Any

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

from xpupool.server.throughput_knowledge import scoped

STORES = BOTH_STORES
T4 = "NVIDIA T4"


def running(server: Server, token: str, spec: str) -> int:
    """A job of ``spec``, placed and reported running by its node's agent."""
    made = submit(server, token, spec)["id"]
    server.schedule()
    placed = job(server, made)
    assert placed["state"] == "scheduled", placed
    heartbeat(server, placed["assignments"][0]["node"], [report(made, 0, "running")])
    return int(made)


def post(server: Server, token: str, job_id: int, body: dict[str, Any]) -> Any:
    return server.client.post(f"/v1/jobs/{job_id}/progress", json=body, headers=server.as_(token))


def fleet(server: Server) -> None:
    node(server, "fast", count=2)  # A100-SXM4-80GB
    node(server, "slow", count=2, model=T4, memory_mib=16_384)


@pytest.mark.slow
def test_rates_become_measured_speeds_that_survive_a_restart(server: Server) -> None:
    fleet(server)
    a = tenant(server, "a")
    on_fast = running(server, a, "A100:1 kind=resnet")
    on_slow = running(server, a, "T4:1 kind=resnet")
    r = post(server, a, on_fast, {"rate": 100.0})
    assert r.status_code == 200, r.text
    assert r.json() == {
        "job_id": on_fast,
        "kind": "resnet",
        "model": "A100-SXM4-80GB",
        "rate": 100.0,
        "runs": 1,
    }
    # the agent's path: a report carrying the rate its job wrote to its progress file
    slow_report = {**report(on_slow, 0, "running"), "progress_rate": 25.0}
    heartbeat(server, "slow", [slow_report])
    assert server.plane.throughput.table.measured(scoped("a", "resnet")) == {
        "A100-SXM4-80GB": (100.0, 1),
        "T4": (25.0, 1),
    }
    restarted = reopen(server)
    try:
        with restarted.client:
            assert restarted.plane.throughput.table.measured(scoped("a", "resnet")) == {
                "A100-SXM4-80GB": (100.0, 1),
                "T4": (25.0, 1),
            }
            # a later job of the kind that declares no speeds is given the measured ones
            later = submit(restarted, a, "any kind=resnet policy=throughput")["id"]
            restarted.schedule()
            reasons = " ".join(e["reason"] for e in job(restarted, later)["events"])
            assert (
                "speed A100-SXM4-80GB: 1.0x, T4: 0.25x (measured, 2 runs); "
                "on NVIDIA A100-SXM4-80GB (1.0x)" in reasons
            ), reasons
    finally:
        restarted.plane.db.dispose()


@pytest.mark.slow
def test_only_a_running_jobs_owner_reports_and_bad_values_name_the_field(server: Server) -> None:
    fleet(server)
    a, b = tenant(server, "a"), tenant(server, "b")
    mine = running(server, a, "A100:1 kind=resnet")
    plain = running(server, a, "A100:1")  # no kind, no image, no model: nothing to learn under
    waiting = submit(server, a, "A100:2 kind=resnet")["id"]  # the A100s are busy: it waits
    server.schedule()
    before = row_counts(server)
    assert post(server, b, mine, {"rate": 1.0}).status_code == 404  # another tenant's job
    for body, field in (
        ({"rate": 0}, "rate"),
        ({"rate": -1.0}, "rate"),
        ({"rate": 1e13}, "rate"),
        ({"rate": "fast"}, "rate"),
        ({"rate": 1.0, "replica": 3}, "replica"),
        ({"rate": 1.0, "units": "steps"}, "units"),
    ):
        r = post(server, a, mine, body)
        assert r.status_code == 422, (body, r.text)
        assert r.json()["field"] == field, (body, r.json())
    r = post(server, a, plain, {"rate": 1.0})
    assert r.status_code == 409 and "no kind" in r.text
    r = post(server, a, waiting, {"rate": 1.0})
    assert r.status_code == 409 and "not running" in r.text
    assert row_counts(server) == before  # nothing refused was stored
    assert post(server, server.admin_token, mine, {"rate": 3.0}).status_code == 200


@pytest.mark.slow
def test_a_tenant_moves_only_its_own_figures_and_each_report_a_bounded_step(
    server: Server,
) -> None:
    fleet(server)
    a, b = tenant(server, "a"), tenant(server, "b")
    ours = running(server, a, "A100:1 kind=resnet")
    theirs = running(server, b, "A100:1 kind=resnet")
    assert post(server, a, ours, {"rate": 100.0}).status_code == 200
    r = post(server, b, theirs, {"rate": 1e12})  # b's own figure: a's stays as it was
    assert r.status_code == 200 and r.json()["rate"] == 1e12
    assert server.plane.throughput.table.measured(scoped("a", "resnet")) == {
        "A100-SXM4-80GB": (100.0, 1)
    }
    r = post(server, a, ours, {"rate": 1e12})  # one wild report: at most a bounded step
    assert r.status_code == 200 and r.json()["rate"] <= 100.0 * 10
    assert r.json()["runs"] == 1  # the same run reporting again


def test_a_report_whose_write_failed_is_not_kept_in_memory(server: Server) -> None:
    """A failed write rolls the store back and the plane reloads its books: the measured figures
    are read back with them, so memory is not one report ahead of the store."""
    fleet(server)
    a = tenant(server, "a")
    on_fast = running(server, a, "A100:1 kind=resnet")
    assert post(server, a, on_fast, {"rate": 100.0}).status_code == 200
    plane = server.plane
    held = plane.held_jobs[on_fast]

    def a_write_that_fails() -> None:
        with plane.write() as conn:
            plane.throughput.report_run(conn, plane.engine, held, 0, 300.0, plane.clock())
            raise RuntimeError("the rest of the write failed")

    with pytest.raises(RuntimeError):
        a_write_that_fails()
    plane.reload()
    assert plane.throughput.table.measured(scoped("a", "resnet")) == {"A100-SXM4-80GB": (100.0, 1)}
