"""The re-cuts the scheduling cycle proposes, as the plane offers them (issue 53): a partition job
whose profile no instance has is accepted when a re-cut could make one, waits while the card's
instances have not been idle for the minimum and is tried again when they have (nothing else is
released meanwhile), and its re-cut then reaches the agent; a node pool that forbids re-cuts
gets none, and such a job is refused at submission as before."""

from __future__ import annotations

from server_kit import Server, job, submit, tenant
from test_card_recut import CARD, _heartbeat, _register

from xpupool.server.plane.card_recut import DEFAULT_MIN_IDLE_S


def test_a_job_waits_for_the_minimum_idle_time_then_its_recut_reaches_the_agent(
    server: Server,
) -> None:
    _register(server)  # 3g.40gb@0, 2g.20gb@4, 1g.10gb@6, none idle 5 min yet (plane start)
    token = tenant(server, "a")
    asked = submit(server, token, "A100 mig=4g.40gb")
    assert server.schedule() == 0
    assert "re-cutting" not in job(server, asked["id"])["reason"]
    assert _heartbeat(server)["recut"] == []
    server.clock.advance(DEFAULT_MIN_IDLE_S + 1)
    assert server.schedule() == 0  # tried again though nothing was released: a re-cut now
    reason = job(server, asked["id"])["reason"]
    assert f"re-cutting {CARD} on n1 to " in reason and "4g.40gb@0" in reason, reason
    (order,) = _heartbeat(server)["recut"]
    assert order["card"] == CARD and "4g.40gb@0" in order["layout"], order
    assert server.schedule() == 0  # in flight: the job asks for no other re-cut
    assert len(_heartbeat(server)["recut"]) == 1


def test_a_pool_that_forbids_recuts_gets_none(server: Server) -> None:
    _register(server, **{"xpupool/recut": "false"})
    server.clock.advance(DEFAULT_MIN_IDLE_S + 1)
    token = tenant(server, "a")
    r = server.client.post(
        "/v1/jobs",
        json={"spec": "A100 mig=4g.40gb", "command": ["true"]},
        headers=server.as_(token),
    )
    assert r.status_code == 422, r.text
    assert r.json()["field"].endswith("devices.partition"), r.text
    submit(server, token, "A100 mig=3g.40gb")
    assert server.schedule() == 1  # the instance that exists serves as before
    assert _heartbeat(server)["recut"] == []
