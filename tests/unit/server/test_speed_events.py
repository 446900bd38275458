"""A job that states its speeds is told, in its admission event, its expected speed per card type
and the card type it got (issue 55)."""

from __future__ import annotations

import pytest
from server_kit import Server, job, node, queue, submit, tenant


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


@pytest.mark.slow
def test_a_queue_can_place_its_jobs_by_throughput(server: Server) -> None:
    """A queue whose profile is 'throughput' places its jobs that name no policy by their speeds;
    the default queue, with the default policy, does not look at them."""
    token = tenant(server, "team")
    queue(server, "fast-first", "team", [], profile="throughput")
    node(server, "a-slow", count=2, model="T4", memory_mib=16_384)  # first in the packing order
    node(server, "b-fast", count=2, model="A100-SXM4-80GB")
    plain = submit(server, token, "any speed=A100:1.0,T4:0.25")
    server.schedule()
    by_speed = submit(server, token, "any speed=A100:1.0,T4:0.25 queue=fast-first")
    server.schedule()
    reasons = " ".join(e["reason"] or "" for e in job(server, plain["id"])["events"])
    assert "on T4 (0.25x)" in reasons  # packed: the default policy ignores speeds
    reasons = " ".join(e["reason"] or "" for e in job(server, by_speed["id"])["events"])
    assert "on A100-SXM4-80GB (1.0x)" in reasons
