"""Energy shares add up to the card's samples (issue 52): for shared cards whose power readings
change between flushes, each card's tenants' energy plus the pool's remainder equals, per card,
the sum over the flushes that counted it of the power read at that flush times the time since
the flush before. The meter's first flush opens the window (the pool is charged nothing before
it), as a server's does when it starts: the steps begin after it. A restart (a new meter over the
same store, after a gap, the held runs reported again, what the old one had not flushed lost)
counts each card at the new meter's first flush from where its runs were last written (a run
begun since, from its start), downtime included, at the watts read then. The shares on a card never
exceed it (the engine never over-commits), so the pool's remainder is never negative and nothing
is clamped away.

The meter runs over a real SQLite store; the plane around it is the stand-in of
``test_usage_sums.py`` with readings the steps set. Each card is of its own model, so the all-time
totals per model are per card."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar
from unittest.mock import patch

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
from xpupool.server.storage.usage import usage_records, usage_rollups, usage_totals
from xpupool.server.usage.meter import POOL, UsageMeter

T = TypeVar("T")
MODELS = ("A100-SXM4-80GB", "H100-SXM5-80GB")
NODE = Node(
    "n1",
    64_000,
    1 << 20,
    tuple(Device(f"g{i}", "nvidia", m, 81920, i) for i, m in enumerate(MODELS)),
)


# a step: (seconds later, what): start a run on a card with a share, end one, set a card's
# power, flush, restart (a new meter over the store; 1: it flushes before the runs are reported
# again, as a server's first look comes before its agents' heartbeats; 2: and half of them are
# reported only after the flush after that), or a flush that fails before it commits
step = st.tuples(
    st.floats(0, 5000, allow_nan=False),
    st.one_of(
        st.tuples(st.just("start"), st.integers(0, 1), st.sampled_from([100, 250, 500, 1000])),
        st.tuples(st.just("end"), st.integers(1, 12), st.just(0)),
        st.tuples(st.just("watts"), st.integers(0, 1), st.integers(0, 700)),
        st.tuples(st.just("flush"), st.just(0), st.just(0)),
        st.tuples(st.just("restart"), st.integers(0, 2), st.just(0)),
        st.tuples(st.just("broken"), st.just(0), st.just(0)),
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
# a quarter held across a restart an hour and more later: the pool's share of the downtime too
@example(
    steps=[
        (0.0, ("start", 0, 250)),
        (10.0, ("flush", 0, 0)),
        (4000.0, ("restart", 0, 0)),
        (5.0, ("flush", 0, 0)),
    ]
)
# the same, the restarted meter flushing before the run is reported again, then a run begun
# since the last flush reported again after a second restart
@example(
    steps=[
        (0.0, ("start", 0, 250)),
        (10.0, ("flush", 0, 0)),
        (4000.0, ("restart", 1, 0)),
        (5.0, ("flush", 0, 0)),
        (5.0, ("start", 0, 500)),
        (5.0, ("restart", 1, 0)),
        (5.0, ("flush", 0, 0)),
    ]
)
# two runs on a card, one reported again only after the card's pool was charged for the time
# the plane was down: that energy stays the pool's, the card's adds up
@example(
    steps=[
        (0.0, ("start", 0, 250)),
        (0.0, ("start", 0, 500)),
        (10.0, ("flush", 0, 0)),
        (4000.0, ("restart", 2, 0)),
        (5.0, ("flush", 0, 0)),
        (0.0, ("watts", 0, 500)),
        (5.0, ("flush", 0, 0)),
    ]
)
# a flush that fails, then a restart: the failed one counted nothing, the restart all of it
@example(
    steps=[
        (0.0, ("start", 1, 500)),
        (10.0, ("flush", 0, 0)),
        (20.0, ("broken", 0, 0)),
        (30.0, ("restart", 0, 0)),
        (0.0, ("restart", 0, 0)),
        (5.0, ("broken", 0, 0)),
        (5.0, ("flush", 0, 0)),
    ]
)
def test_holders_and_pool_add_up_to_each_cards_samples(store: Path, steps: list[Any]) -> None:
    path = store / "state.db"
    path.unlink(missing_ok=True)
    db = meta.connect(f"sqlite:///{path}")
    watts = [300.0] * len(MODELS)
    plane = PlaneStandIn(db, lambda uuid: watts[int(uuid[1:])])
    meter = UsageMeter()
    held: dict[int, tuple[int, int, float]] = {}  # job -> (card, permille, started at)
    used = [0] * len(MODELS)  # permille held per card now
    counted: set[int] = set()  # cards with a run open in the meter since its last flush
    since: dict[int, float] = {}  # cards the next flush counts from before its window: from when
    expected = [0.0] * len(MODELS)
    last: float | None = None  # the meter's last flush (None: it has not flushed)
    written: dict[int, float] = {}  # job -> where its stored record was last advanced to
    reported: set[int] = set()  # the jobs this meter was told of
    late: set[int] = set()  # held jobs to be reported again before the next flush
    cover: dict[int, tuple[float, float]] = {}  # card -> the span this meter counted
    next_id = 1

    def flush() -> None:
        nonlocal last
        meter.flush(plane)  # type: ignore[arg-type]
        for c in counted | since.keys():  # each second of a card counted once
            begin = min(t for t in (last, since.get(c)) if t is not None)
            first, to = cover.get(c, (begin, begin))
            seconds = max(first - begin, 0.0) + plane.now - max(begin, to)
            expected[c] += watts[c] * seconds
            cover[c] = (min(first, begin), max(to, plane.now))
        last = plane.now
        written.update(dict.fromkeys(reported & held.keys(), plane.now))
        since.clear()
        counted.clear()
        counted.update(card for j, (card, _p, _s) in held.items() if j in reported)
        for job_id in sorted(late):  # reported after the flush that followed the restart's
            report_again(job_id)
        late.clear()

    def broken_flush() -> None:
        """A flush whose last write fails: its transaction is rolled back, nothing moves."""

        gone = RuntimeError("the store went away")
        with patch.object(meter, "_write_sums", side_effect=gone), pytest.raises(RuntimeError):
            meter.flush(plane)  # type: ignore[arg-type]

    def report_again(job_id: int) -> None:
        card, _p, begun = held[job_id]
        t = written.get(job_id, begun)
        since[card] = min(since.get(card, t), t)
        reported.add(job_id)
        meter.replica_started(plane.held[job_id], 0, NODE, plane.now)

    flush()  # the window opens, as at a server's start
    for later, (what, a, b) in steps:
        plane.now += later
        # no start before a meter's first flush: a server's comes as it starts
        if what == "start" and used[a] + b <= 1000 and last is not None:
            share = DeviceShare(f"g{a}", a, 1024, b)
            alloc = Allocation(next_id, "r", 0, "n1", 0, 0, 0, (share,))
            job = HeldJob(next_id, f"t{next_id}", "q", "", 0, JobPhase.RUNNING, [alloc], attempt=1)
            job.started_at = plane.now
            plane.held[next_id] = job
            meter.replica_started(job, 0, NODE, plane.now)
            held[next_id] = (a, b, plane.now)
            used[a] += b
            counted.add(a)
            reported.add(next_id)
            next_id += 1
        elif what == "end" and a in held:
            card, permille, _since = held.pop(a)
            plane.held.pop(a)
            used[card] -= permille
            meter.job_released(a, 1, plane.now)
            if a in late:  # its stored record ends here, from where it was written
                late.discard(a)
                if a in written:
                    since[card] = min(since.get(card, written[a]), written[a])
        elif what == "watts":
            watts[a] = float(b)
        elif what == "flush":
            flush()
        elif what == "broken":
            broken_flush()
        elif what == "restart":  # what the old meter had not flushed is lost
            plane.now += 1.0  # down a while: a run it held began before it came back
            meter = UsageMeter()
            last = None
            since.clear()
            counted.clear()
            reported.clear()
            late.clear()
            cover.clear()
            if a:
                flush()
            for job_id in held:  # reported again, as running
                if a == 2 and job_id % 2:
                    late.add(job_id)
                else:
                    report_again(job_id)
    plane.now += 1.0
    flush()
    with db.connect() as conn:
        t, r, rec = usage_totals, usage_rollups, usage_records
        by_model = dict(
            conn.execute(select(t.c.model, func.sum(t.c.energy_j)).group_by(t.c.model)).all()
        )
        rolled: dict[tuple[str, str, bool], float] = {}  # (step, model, the pool's) -> joules
        for step_name, model, tenant, energy in conn.execute(
            select(r.c.step, r.c.model, r.c.tenant, func.sum(r.c.energy_j)).group_by(
                r.c.step, r.c.model, r.c.tenant
            )
        ).all():
            key = (str(step_name), str(model), tenant == POOL)
            rolled[key] = rolled.get(key, 0.0) + float(energy)
            assert energy >= 0, (step_name, model, tenant)  # nothing taken back: counters grow
        recorded = dict(
            conn.execute(select(rec.c.model, func.sum(rec.c.energy_j)).group_by(rec.c.model)).all()
        )
        buckets = conn.execute(select(r.c.step, r.c.bucket).distinct()).all()
    for c, model in enumerate(MODELS):
        assert by_model.get(model, 0.0) == pytest.approx(expected[c], rel=1e-9, abs=1e-6), model
        for step_name in ("hour", "day", "month"):  # the rollups: holders as the records say
            holders = rolled.get((step_name, model, False), 0.0)
            pool = rolled.get((step_name, model, True), 0.0)
            assert holders == pytest.approx(recorded.get(model, 0.0), rel=1e-9, abs=1e-6)
            assert holders + pool == pytest.approx(expected[c], rel=1e-9, abs=1e-6), step_name
    for step_name, bucket in buckets:  # keyed by the buckets' starts, inside the time watched
        size = {"hour": 3600.0, "day": 86400.0}.get(step_name)
        assert size is None or bucket % size == 0, (step_name, bucket)
        assert bucket <= plane.now, (step_name, bucket)
    db.dispose()
