"""Energy shares add up to the card's samples (issue 52): for shared cards whose power readings
change between flushes, each card's tenants' energy plus the pool's remainder equals, per card,
the sum over the flushes that counted it of the power read at that flush times the time since
the flush before. The meter's first flush opens the window (the pool is charged nothing before
it), as a server's does when it starts: the steps begin after it. The shares on a card never
exceed it (the engine never over-commits), so the pool's remainder is never negative and nothing
is clamped away.

The meter runs over a real SQLite store; the plane around it is the stand-in of
``test_usage_sums.py`` with readings the steps set. Each card is of its own model, so the all-time
totals per model are per card."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from sqlalchemy import func, select

from meter_stand_in import PlaneStandIn
from xpupool.model.allocation import Allocation, DeviceShare
from xpupool.model.device import Device, Node
from xpupool.server.plane import HeldJob
from xpupool.server.schemas.jobs import JobPhase
from xpupool.server.storage import meta
from xpupool.server.storage.usage import usage_totals
from xpupool.server.usage.meter import UsageMeter

T = TypeVar("T")
MODELS = ("A100-SXM4-80GB", "H100-SXM5-80GB")
NODE = Node(
    "n1",
    64_000,
    1 << 20,
    tuple(Device(f"g{i}", "nvidia", m, 81920, i) for i, m in enumerate(MODELS)),
)


# a step: (seconds later, what): start a run on a card with a share, end one, set a card's
# power, or flush
step = st.tuples(
    st.floats(0, 5000, allow_nan=False),
    st.one_of(
        st.tuples(st.just("start"), st.integers(0, 1), st.sampled_from([100, 250, 500, 1000])),
        st.tuples(st.just("end"), st.integers(1, 12), st.just(0)),
        st.tuples(st.just("watts"), st.integers(0, 1), st.integers(0, 700)),
        st.tuples(st.just("flush"), st.just(0), st.just(0)),
    ),
)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("energy")


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(steps=st.lists(step, min_size=1, max_size=30))
# a quarter of a card held, then none of it: the pool's three quarters, then all of it
@example(steps=[(0.0, ("start", 0, 250)), (10.0, ("end", 1, 0)), (5.0, ("flush", 0, 0))])
def test_holders_and_pool_add_up_to_each_cards_samples(store: Path, steps: list[Any]) -> None:
    path = store / "state.db"
    path.unlink(missing_ok=True)
    db = meta.connect(f"sqlite:///{path}")
    watts = [300.0] * len(MODELS)
    plane = PlaneStandIn(db, lambda uuid: watts[int(uuid[1:])])
    meter = UsageMeter()
    held: dict[int, tuple[int, int, float]] = {}  # job -> (card, permille, counted since)
    used = [0] * len(MODELS)  # permille held per card now
    counted: set[int] = set()  # cards with a run open in the meter since the last flush
    expected = [0.0] * len(MODELS)
    last: float | None = None
    next_id = 1

    def flush() -> None:
        nonlocal last
        meter.flush(plane)  # type: ignore[arg-type]
        for c in counted:
            assert last is not None  # the window opened first
            expected[c] += watts[c] * (plane.now - last)
        last = plane.now
        counted.clear()
        counted.update(card for card, _p, _s in held.values())

    flush()  # the window opens, as at a server's start
    for later, (what, a, b) in steps:
        plane.now += later
        if what == "start" and used[a] + b <= 1000:
            share = DeviceShare(f"g{a}", a, 1024, b)
            alloc = Allocation(next_id, "r", 0, "n1", 0, 0, 0, (share,))
            job = HeldJob(next_id, f"t{next_id}", "q", "", 0, JobPhase.RUNNING, [alloc], attempt=1)
            plane.held[next_id] = job
            meter.replica_started(job, 0, NODE, plane.now)
            held[next_id] = (a, b, plane.now)
            used[a] += b
            counted.add(a)
            next_id += 1
        elif what == "end" and a in held:
            card, permille, _since = held.pop(a)
            plane.held.pop(a)
            used[card] -= permille
            meter.job_released(a, 1, plane.now)
        elif what == "watts":
            watts[a] = float(b)
        elif what == "flush":
            flush()
    plane.now += 1.0
    flush()
    with db.connect() as conn:
        t = usage_totals
        by_model = dict(
            conn.execute(select(t.c.model, func.sum(t.c.energy_j)).group_by(t.c.model)).all()
        )
    for c, model in enumerate(MODELS):
        assert by_model.get(model, 0.0) == pytest.approx(expected[c], rel=1e-9, abs=1e-6), model
    db.dispose()
