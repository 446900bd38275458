"""A job that states its speeds is told, in its admission event, its expected speed per card type
and the card type it got (issue 55)."""

from __future__ import annotations

import pytest
from server_kit import Server, job, node, submit, tenant


@pytest.mark.slow
def test_admission_event_gives_speeds_and_the_choice(server: Server) -> None:
    token = tenant(server, "team")
    node(server, "slow", count=2, model="T4", memory_mib=16_384)
    node(server, "fast", count=2, model="A100-SXM4-80GB")
    spec = "any kind=resnet50 speed=A100:1.0,T4:0.25 policy=throughput"
    made = submit(server, token, spec)
    server.schedule()
    reasons = [e["reason"] for e in job(server, made["id"])["events"]]
    admitted = next(r for r in reasons if r and "speed" in r)
    assert "speed A100: 1.0x, T4: 0.25x (declared); on A100-SXM4-80GB (1.0x)" in admitted
    plain = submit(server, token, "any")
    server.schedule()
    assert not any("speed" in (e["reason"] or "") for e in job(server, plain["id"])["events"])
