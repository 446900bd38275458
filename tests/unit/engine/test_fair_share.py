"""Fair share from history (engine/cycle/fair_share.py): the decayed share in closed form, and
the admission order it gives against DRF on what is held now."""

from __future__ import annotations

import math

import pytest

from xpupool.engine.cycle.admission import Admission, Admitted, QueueSpec
from xpupool.engine.cycle.fair_share import DecayedUsage
from xpupool.model import DeviceRequest, Request

from factories import engine_for, gpu_node

H = 600.0


def test_a_steady_share_shows_as_itself_and_halves_each_half_life_after() -> None:
    usage = DecayedUsage(H)
    usage.advance(0.0, {})
    usage.advance(100 * H, {"a": 0.5})  # held 0.5 for 100 half-lives
    assert usage.shares()["a"] == pytest.approx(0.5)
    usage.advance(101 * H, {})  # then nothing for one half-life
    assert usage.shares()["a"] == pytest.approx(0.25)
    usage.advance(100 * H, {"a": 1.0})  # a clock that goes back counts nothing
    assert usage.shares()["a"] == pytest.approx(0.25)
    fresh = DecayedUsage(H)
    fresh.advance(0.0, {})
    fresh.advance(H, {"b": 1.0})  # one half-life of the whole pool: 1 - 1/2
    assert fresh.shares()["b"] == pytest.approx(0.5)
    with pytest.raises(ValueError, match="half-life"):
        DecayedUsage(0.0)
    with pytest.raises(ValueError, match="half-life"):
        DecayedUsage(math.inf)


def _one_card(tenant: str) -> tuple[Request, str]:
    return Request("j", 1000, 1024, DeviceRequest(count=1)), f"q-{tenant}"


def test_history_puts_the_tenant_that_just_held_the_pool_behind_drf_does_not() -> None:
    """Tenant 'a' held the whole pool for an hour and let it go; 'b' held nothing. Both wait
    now, a's job the older: DRF sees two tenants holding nothing and takes the older job first,
    history takes b's."""
    now = [0.0]
    queues = [QueueSpec(f"q-{t}", t, ()) for t in ("a", "b")]
    orders = {}
    for name, history in (("drf", None), ("history", DecayedUsage(H))):
        now[0] = 0.0
        engine = engine_for(gpu_node("n", count=2))
        clock = (lambda: now[0]) if history is not None else None
        admission = Admission(engine, queues, history, clock)
        held = [admission.admit(Request("j", 1000, 1024, DeviceRequest(count=2)), "q-a")]
        assert isinstance(held[0], Admitted)
        now[0] = 3600.0
        for alloc in held[0].placement.allocations:
            admission.release(alloc)
        now[0] = 3700.0
        orders[name] = admission.order([_one_card("a"), _one_card("b")])
        if history is not None:
            shares = admission.history_shares()
            held_then_decayed = (1 - 2 ** (-3600 / H)) * 2 ** (-100 / H)
            assert shares == {"a": pytest.approx(held_then_decayed)}
    assert orders == {"drf": [0, 1], "history": [1, 0]}


def test_a_seed_counts_what_was_held_decayed_to_now_and_counting_goes_on() -> None:
    history = DecayedUsage(3600.0)
    # half the pool for one hour, ending an hour ago (counted at its middle, 1.5 h ago)
    history.seed(10_000.0, {"a": [(1800.0, 10_000.0 - 5400.0)], "b": [(0.0, 9_000.0)]})
    expected = 1800.0 * 2 ** (-1.5) * math.log(2) / 3600.0
    assert history.shares() == pytest.approx({"a": expected})  # b held nothing: not counted
    history.advance(13_600.0, {"b": 1.0})  # an hour more: a decays by half, b counts
    shares = history.shares()
    assert shares["a"] == pytest.approx(expected / 2)
    assert shares["b"] == pytest.approx(0.5)  # a whole pool for one half-life: half of it
