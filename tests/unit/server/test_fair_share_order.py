"""The server's admission order with fair share from history (``xpupool up --fair-share
history``; engine/cycle/fair_share.py): a tenant that just held the pool waits behind one that
did not, where DRF on what is held now takes the older job first. One real app, a hand-moved
clock."""

from __future__ import annotations

import pytest
from server_kit import Server, heartbeat, job, node, reopen, report, submit, tenant

from xpupool.engine.cycle.fair_share import DecayedUsage


@pytest.mark.parametrize("order", ["drf", "history"])
def test_who_gets_the_freed_card_after_a_tenant_held_it_an_hour(server: Server, order: str) -> None:
    if order == "history":
        server.plane.fair_share = DecayedUsage(600.0)
        server.plane.rebuild_admission()
    node(server, "n1", count=1)
    a, b = tenant(server, "a"), tenant(server, "b")
    first = submit(server, a, "A100:1")["id"]
    server.schedule()
    heartbeat(server, "n1")
    heartbeat(server, "n1", [report(first, 0, "running")])
    server.clock.advance(3600)  # a holds the only card for an hour
    again = submit(server, a, "A100:1")["id"]  # older than b's
    other = submit(server, b, "A100:1")["id"]
    heartbeat(server, "n1", [report(first, 0, "succeeded", 0)])
    server.clock.advance(60)
    server.schedule()
    states = {j: job(server, j)["state"] for j in (again, other)}
    placed = [j for j, state in states.items() if state != "pending"]
    assert placed == ([again] if order == "drf" else [other]), states


def test_a_restarted_plane_remembers_who_held_the_pool(server: Server) -> None:
    """The history starts from the stored hourly usage: after a restart the tenant that held the
    only card for an hour still waits behind one that did not (a history started empty would
    take the older job, as DRF does)."""
    node(server, "n1", count=1)
    a, b = tenant(server, "a"), tenant(server, "b")
    first = submit(server, a, "A100:1")["id"]
    server.schedule()
    heartbeat(server, "n1")
    heartbeat(server, "n1", [report(first, 0, "running")])
    server.plane.meter.flush(server.plane)
    server.clock.advance(3600)  # a holds the only card for an hour
    heartbeat(server, "n1", [report(first, 0, "succeeded", 0)])
    server.plane.meter.flush(server.plane)  # the hour is in the stored rollups
    again = reopen(server)
    try:
        with again.client:
            again.plane.use_fair_share_history(600.0)
            assert set(again.plane.fair_share.shares()) == {"a"}  # type: ignore[union-attr]
            later = submit(again, a, "A100:1")["id"]  # older than b's
            other = submit(again, b, "A100:1")["id"]
            heartbeat(again, "n1")
            again.clock.advance(60)
            again.schedule()
            states = {j: job(again, j)["state"] for j in (later, other)}
            assert [j for j, s in states.items() if s != "pending"] == [other], states
    finally:
        again.plane.db.dispose()
