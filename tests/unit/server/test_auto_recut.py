"""The re-cuts the scheduling cycle proposes, as the plane offers them (issue 53): a partition job
whose profile no instance has is accepted when a re-cut could make one, waits while the card's
instances have not been idle for the minimum and is tried again when they have (nothing else is
released meanwhile), and its re-cut then reaches the agent; a node pool that forbids re-cuts
gets none, and such a job is refused at submission as before."""

from __future__ import annotations

from typing import Any

import pytest
from server_kit import BOTH_STORES, Server, job, queue, reopen, submit, tenant
from test_card_recut import AFTER, CARD, PATH, _heartbeat, _put, _register

from postgres import store_param
from xpupool.server.plane.card_recut import DEFAULT_MIN_IDLE_S
from xpupool.server.plane.recut_backoff import BASE_S, MAX_S


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


def _fail(server: Server) -> None:
    """The agent takes the re-cut asked and reports its tool failed."""
    (order,) = _heartbeat(server)["recut"]
    failure = {"card": order["card"], "reason": "nvidia-smi mig -cgi 4g.40gb:0 -C: In use"}
    assert _heartbeat(server, recut_failed=[failure])["recut"] == []


def test_a_failed_recut_is_not_asked_again_until_its_rest_ends(server: Server) -> None:
    _register(server)
    server.clock.advance(DEFAULT_MIN_IDLE_S + 1)
    token = tenant(server, "a")
    asked = submit(server, token, "A100 mig=4g.40gb")
    rests = []
    for failures in (1, 2):
        assert server.schedule() == 0
        assert "re-cutting" in job(server, asked["id"])["reason"]
        _fail(server)
        assert server.schedule() == 0
        assert _heartbeat(server)["recut"] == []  # the next pass asks none
        reason = job(server, asked["id"])["reason"]
        assert f"re-cuts of {CARD} on n1 failed" in reason and "In use" in reason, reason
        assert "none proposed before" in reason, reason
        card = server.client.get(PATH, headers=server.admin).json()
        assert card["failures"] == failures, card
        rests.append(card["resting_until"] - server.clock())
        server.clock.advance(card["resting_until"] - server.clock() + 1)
    assert rests == [BASE_S, 2 * BASE_S]  # doubling
    assert server.schedule() == 0  # the rest over, the job is tried and asks again
    assert len(_heartbeat(server)["recut"]) == 1
    _heartbeat(server, recut_failed=[{"card": CARD, "reason": "In use"}])
    assert server.client.get(PATH, headers=server.admin).json()["failures"] == 3
    r = _put(server, ["3g.40gb@0", "3g.40gb@4"])  # the admin ends the rest
    assert r.status_code == 200, r.text
    assert r.json()["failures"] == 0 and r.json()["resting_until"] is None, r.json()


def test_the_rest_doubles_up_to_its_longest() -> None:
    from xpupool.server.plane.recut_backoff import RecutBackoff

    backoff = RecutBackoff()
    rests = [backoff.failed("n1", CARD, 0.0, "no").until for _ in range(8)]
    assert rests == [60.0, 120.0, 240.0, 480.0, 960.0, MAX_S, MAX_S, MAX_S]
    assert backoff.resting("n1", CARD, MAX_S - 1) is not None
    assert backoff.resting("n1", CARD, MAX_S) is None
    assert backoff.resting("n1", "another", 0.0) is None
    backoff.cleared("n1", CARD)
    assert backoff.last("n1", CARD) is None
    assert backoff.failed("n1", CARD, 0.0, "no").until == BASE_S


def _recut_asked(server: Server) -> dict[str, Any]:
    """A ``mig=4g.40gb`` job of tenant a, for which the first pass asks a re-cut of the card
    (its instances idle for the minimum)."""
    _register(server)
    server.clock.advance(DEFAULT_MIN_IDLE_S + 1)
    asked = submit(server, tenant(server, "a"), "A100 mig=4g.40gb")
    assert server.schedule() == 0
    said = job(server, asked["id"])["reason"]
    assert f"re-cutting {CARD} on n1 to " in said, said
    return asked


def test_a_restarted_plane_answers_the_job_with_its_recut_in_flight(server: Server) -> None:
    asked = _recut_asked(server)
    again = reopen(server)
    try:
        with again.client:
            assert again.schedule() == 0
            reason = job(again, asked["id"])["reason"]
            assert f"re-cutting {CARD} on n1 to " in reason, reason  # not forgotten
            card = again.client.get(PATH, headers=again.admin).json()
            assert card["job"] == asked["id"], card
            assert [e["event"] for e in card["events"]] == ["asked"], card  # none asked again
            (order,) = _heartbeat(again)["recut"]
            assert "4g.40gb@0" in order["layout"], order
    finally:
        again.plane.db.dispose()


@pytest.mark.parametrize("server", [store_param(s) for s in BOTH_STORES], indirect=True)
def test_a_restarted_plane_keeps_a_failed_card_at_rest(server: Server) -> None:
    """The rest is stored (``card_rests``, on either store) and read back at the start."""
    asked = _recut_asked(server)
    _fail(server)
    before = server.client.get(PATH, headers=server.admin).json()
    assert before["failures"] == 1, before
    again = reopen(server)
    try:
        with again.client:
            card = again.client.get(PATH, headers=again.admin).json()
            assert (card["failures"], card["resting_until"]) == (1, before["resting_until"]), card
            assert again.schedule() == 0
            assert _heartbeat(again)["recut"] == []  # still at rest: not asked again
            reason = job(again, asked["id"])["reason"]
            assert "none proposed before" in reason and "In use" in reason, reason
            # the rest over, and the minimum idle time counted from the restart
            again.clock.advance(DEFAULT_MIN_IDLE_S + 1)
            assert again.schedule() == 0
            _fail(again)
            card = again.client.get(PATH, headers=again.admin).json()
            assert card["failures"] == 2, card  # the count goes on: the rest doubles
            assert card["resting_until"] - again.clock() == 2 * BASE_S, card
    finally:
        again.plane.db.dispose()


def test_lower_priority_work_in_the_way_of_a_recut_is_preempted_for_it(server: Server) -> None:
    _register(server)
    server.clock.advance(DEFAULT_MIN_IDLE_S + 1)
    token = tenant(server, "a")
    queue(server, "a", "a", [], max_priority=10)
    low = submit(server, token, "A100 mig=3g.40gb")  # on 3g.40gb@0, where a 4g.40gb starts
    assert server.schedule() == 1
    high = submit(server, token, "A100 mig=4g.40gb", priority=10)
    assert server.schedule() == 0
    reason = job(server, high["id"])["reason"]
    assert reason.endswith("preempting 1 lower-priority job(s)"), reason
    assert job(server, low["id"])["reason"].startswith("preempted by job"), job(server, low["id"])
    assert _heartbeat(server)["recut"] == []  # asked by the next pass, once the victim is gone
    # the victim (not started yet) gave its instance back at once; the instance is re-cut at once
    # (no minimum idle time after a preemption), before the requeued victim could take it back
    assert server.schedule() == 0
    assert job(server, low["id"])["state"] == "pending"
    (order,) = _heartbeat(server)["recut"]
    assert "4g.40gb@0" in order["layout"], order
    assert f"re-cutting {CARD} on n1 to " in job(server, high["id"])["reason"]


def test_an_instance_freed_by_any_other_preemption_keeps_the_minimum_idle_time(
    server: Server,
) -> None:
    _register(server, AFTER)  # 3g.40gb@0, 3g.40gb@4
    server.clock.advance(DEFAULT_MIN_IDLE_S + 1)
    token = tenant(server, "a")
    queue(server, "a", "a", [], max_priority=10)
    low = [submit(server, token, "A100 mig=3g.40gb")["id"] for _ in range(2)]
    assert server.schedule() == 2
    high = submit(server, token, "A100 mig=3g.40gb", priority=10)  # no re-cut: a 3g freed
    assert server.schedule() == 0
    assert job(server, high["id"])["reason"].endswith("preempting 1 lower-priority job(s)")
    (victim,) = [i for i in low if job(server, i)["state"] == "pending"]  # gave it back at once
    card = server.client.get(PATH, headers=server.admin).json()
    freed = "3g.40gb@4" if "3g.40gb@4" not in card["busy"] else "3g.40gb@0"
    kept = "3g.40gb@0" if freed == "3g.40gb@4" else "3g.40gb@4"
    other = "2g.20gb@4" if freed == "3g.40gb@4" else "2g.20gb@0"
    # the freed instance held work a moment ago: no re-cut destroys it before the minimum
    r = _put(server, [kept, other])
    assert r.status_code == 409, (victim, r.text)
    assert "less than" in r.json()["reason"], r.text


def test_the_offer_tells_instances_kept_for_the_idle_minimum_from_those_kept_for_good(
    server: Server,
) -> None:
    from xpupool.server.plane.auto_recut import offered_cards

    _register(server)  # 3g.40gb@0, 2g.20gb@4, 1g.10gb@6, none idle 5 min yet (plane start)
    r = server.client.post("/v1/devices/MIG-n1-0-0/cordon", headers=server.admin)
    assert r.status_code == 200, r.text
    with server.plane.locked():
        (card,) = offered_cards(server.plane, {})
    assert card.ripening == {("2g.20gb", 4), ("1g.10gb", 6)}  # the cordoned 3g is kept for good
    assert card.busy == {("3g.40gb", 0), ("2g.20gb", 4), ("1g.10gb", 6)}
    server.clock.advance(DEFAULT_MIN_IDLE_S + 1)
    with server.plane.locked():
        (card,) = offered_cards(server.plane, {})
    assert (card.busy, card.ripening) == ({("3g.40gb", 0)}, set())


def test_a_deleted_node_takes_its_cards_rests_with_it(server: Server) -> None:
    _recut_asked(server)
    _fail(server)
    assert server.client.get(PATH, headers=server.admin).json()["failures"] == 1
    r = server.client.delete("/v1/nodes/n1", headers=server.admin)
    assert r.status_code == 200, r.text
    _register(server)  # the same node and card again: no rest, in memory or stored
    assert server.client.get(PATH, headers=server.admin).json()["failures"] == 0
    again = reopen(server)
    try:
        with again.client:
            assert again.client.get(PATH, headers=again.admin).json()["failures"] == 0
    finally:
        again.plane.db.dispose()
