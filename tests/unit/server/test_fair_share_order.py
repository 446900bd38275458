"""The server's admission order with fair share from history (``xpupool up --fair-share
history``; engine/cycle/fair_share.py): a tenant that just held the pool waits behind one that
did not, where DRF on what is held now takes the older job first. One real app, a hand-moved
clock."""

from __future__ import annotations

import pytest
from server_kit import Server, heartbeat, job, node, report, submit, tenant

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
