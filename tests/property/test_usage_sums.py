"""Metering's sums (issue 52), for any schedule of replica starts, ends, releases and flushes:
the records' card-seconds equal the integral of the allocations over time (each share times the
time it was held), the hourly rollups, the daily rollups and the all-time totals all add up to
the same, and each card's energy, holders plus pool, equals its power times the time watched.

The meter runs over a real SQLite store; the plane around it is a stand-in with only what the
meter reads (its clock, store, held jobs and card readings), so a hundred schedules run in
seconds."""

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
from xpupool.server.storage.usage import usage_records, usage_rollups, usage_totals
from xpupool.server.usage.meter import POOL, UsageMeter

T = TypeVar("T")
CARDS = 3
WATTS = 300.0
NODE = Node(
    "n1",
    64_000,
    1 << 20,
    tuple(Device(f"g{i}", "nvidia", "A100-SXM4-80GB", 81920, i) for i in range(CARDS)),
)


# a step: (seconds later, what): start a job on a card with a share, end one, or flush
step = st.tuples(
    st.floats(0, 5000, allow_nan=False),
    st.one_of(
        st.tuples(st.just("start"), st.integers(0, CARDS - 1), st.sampled_from([250, 500, 1000])),
        st.tuples(st.just("end"), st.integers(0, 20), st.booleans()),
        st.tuples(st.just("flush"), st.just(0), st.just(0)),
        st.tuples(st.just("release"), st.just(0), st.just(0)),
    ),
)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("usage")


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(steps=st.lists(step, min_size=1, max_size=30))
# a replica's end, then its job's release, written by one flush: the run ends at the first
@example(steps=[(0.0, ("start", 0, 1000)), (10.0, ("end", 1, True)), (100.0, ("release", 0, 0))])
def test_usage_adds_up_to_the_allocations_integral(store: Path, steps: list[Any]) -> None:
    path = store / "state.db"
    path.unlink(missing_ok=True)
    db = meta.connect(f"sqlite:///{path}")
    plane = PlaneStandIn(db, lambda _uuid: WATTS)
    meter = UsageMeter()
    held: dict[int, tuple[float, float, int]] = {}  # job -> (start, share, card)
    integral = 0.0
    ended: list[int] = []
    first_flush: float | None = None
    next_id = 1
    for later, (what, a, b) in steps:
        plane.now += later
        if what == "start":
            alloc = Allocation(next_id, "r", 0, "n1", 0, 0, 0, (DeviceShare(f"g{a}", a, 1024, b),))
            job = HeldJob(next_id, "t", "q", "", 0, JobPhase.RUNNING, [alloc], attempt=1)
            plane.held[next_id] = job
            meter.replica_started(job, 0, NODE, plane.now)
            held[next_id] = (plane.now, b / 1000, a)
            next_id += 1
        elif what == "end" and a in held:
            start, share, _card = held.pop(a)
            plane.held.pop(a)
            integral += share * (plane.now - start)
            if b:  # its replica ended; the job's devices are given back later
                meter.replica_ended(a, 1, 0, plane.now)
                ended.append(a)
            else:
                meter.job_released(a, 1, plane.now)
        elif what == "release":  # the release of jobs whose replica ended earlier
            for job_id in ended:
                meter.job_released(job_id, 1, plane.now)
            ended.clear()
        elif what == "flush":
            meter.flush(plane)  # type: ignore[arg-type]
            first_flush = plane.now if first_flush is None else first_flush
    plane.now += 1.0
    meter.flush(plane)  # type: ignore[arg-type]
    integral += sum(share * (plane.now - start) for start, share, _c in held.values())
    with db.connect() as conn:
        recorded = conn.execute(select(func.sum(usage_records.c.device_seconds))).scalar() or 0.0
        by_step = {
            step: conn.execute(
                select(func.sum(usage_rollups.c.device_seconds)).where(usage_rollups.c.step == step)
            ).scalar()
            or 0.0
            for step in ("hour", "day", "month")
        }
        total = conn.execute(select(func.sum(usage_totals.c.device_seconds))).scalar() or 0.0
        energy = dict(
            conn.execute(
                select(usage_totals.c.tenant, func.sum(usage_totals.c.energy_j)).group_by(
                    usage_totals.c.tenant
                )
            ).all()
        )
    for found in (recorded, *by_step.values(), total):
        assert found == pytest.approx(integral, rel=1e-9, abs=1e-6)
    held_energy = energy.get("t", 0.0)
    assert held_energy == pytest.approx(WATTS * integral, rel=1e-9, abs=1e-3)
    assert energy.get(POOL, 0.0) >= 0.0
    db.dispose()
