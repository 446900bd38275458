"""The timed replay on hand-built partitioned pools: re-cuts only of idle slices, departures
freeing instances, and exact counts of re-cuts and instances destroyed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from xpupool.catalog.partition_geometry import Instance, Layout
from xpupool.catalog.partitions import PartitionScheme
from xpupool.engine.fragmentation import TargetWorkload
from xpupool.engine.partition_recut import recut_choice
from xpupool.model import Device, Node
from xpupool.sim.alibaba import TraceTask
from xpupool.sim.partition_replay import CutPolicy, MigPool, mig_pool
from xpupool.sim.partition_timed import TimedPartitions, timed_request
from xpupool.sim.reservation_plan import ReservationPlan
from xpupool.sim.timed_replay import TimedResult, timed_replay
from xpupool.sim.trace_files import TraceNotFound, default_nodes

Card = tuple[Layout, frozenset[Instance]]
Choice = tuple[int, Layout] | None
ROOT = Path(__file__).resolve().parents[3]
STATIC = (("4g.40gb", 0), ("2g.20gb", 4), ("1g.10gb", 6))


def _pool(cards: int = 1, partitioned: float = 1.0) -> MigPool:
    devices = tuple(Device(f"g{j}", "nvidia", "V100M32", 32768, index=j) for j in range(cards))
    node = Node("n0", 64_000, 256 * 1024, devices)
    return mig_pool([node], (("A100-SXM4-80GB", 1.0),), partitioned, seed=0)


def _task(i: int, milli: int, start: int, end: int, num: int = 1) -> TraceTask:
    return TraceTask(f"t{i}", 1000, 1024, num, milli, (), start, end, start)


def _run(
    pool: MigPool, tasks: list[TraceTask], static: Layout | None = None
) -> tuple[TimedResult, TimedPartitions]:
    workload = TargetWorkload.from_requests(timed_request(t, pool) for t in tasks)

    def rule(scheme: PartitionScheme, cards: Sequence[Card], profile: str) -> Choice:
        return recut_choice(scheme, cards, profile, workload)

    cutting = CutPolicy("static", static=static) if static else CutPolicy("x", rule=rule)
    front = TimedPartitions(pool, cutting, "binpack", 0, workload)
    result = timed_replay(pool.nodes, tasks, "binpack", 0, workload, partitions=front)
    return result, front


def test_a_re_cut_waits_for_the_slices_it_destroys_to_be_idle() -> None:
    # a 1g (t0-100) and a 3g (t0-50) are cut on the one card; the 7g arriving at 10 needs
    # every slice: not when the 3g leaves (the 1g still runs), only when the 1g leaves at 100
    tasks = [_task(0, 100, 0, 100), _task(1, 400, 0, 50), _task(2, 800, 10, 60)]
    result, front = _run(_pool(), tasks)
    assert list(result.wait_s) == [0.0, 0.0, 90.0]
    assert list(result.jct_s) == [100.0, 50.0, 140.0]  # the running 1g kept its whole run
    # the 1g's cut also cuts a 3g (and 1g) in the free slices for the workload, so the 3g
    # needs no cut of its own; then the 7g's over all of them, idle
    assert (front.recuts, front.destroyed) == (2, 5)


def test_a_departure_frees_its_instance_for_the_next_task_without_a_re_cut() -> None:
    tasks = [_task(0, 100, 0, 10), _task(1, 100, 20, 30), _task(2, 120, 40, 50)]
    result, front = _run(_pool(), tasks)
    assert list(result.wait_s) == [0.0, 0.0, 0.0]
    assert (front.recuts, front.destroyed) == (1, 0)  # one 1g cut, taken three times


def test_busy_instances_stay_busy_until_their_task_leaves() -> None:
    # two 1g tasks at once: the first's re-cut cuts every free slice into 1g (the workload's
    # one profile), so the second, a third while both run, and a fourth after both leave, each
    # take a free one; the instances running tasks hold are never destroyed
    tasks = [_task(0, 100, 0, 50), _task(1, 100, 0, 50), _task(2, 100, 10, 20)]
    tasks.append(_task(3, 100, 60, 70))
    result, front = _run(_pool(), tasks)
    assert list(result.wait_s) == [0.0, 0.0, 0.0, 0.0]
    assert (front.recuts, front.destroyed) == (1, 0)


def test_static_layouts_never_re_cut_and_serve_their_mix_over_time() -> None:
    # the static mix has one 1g: the second 1g waits for the first to leave; a 7g never fits
    tasks = [_task(0, 100, 0, 30), _task(1, 100, 5, 40), _task(2, 800, 5, 40)]
    result, front = _run(_pool(), tasks, STATIC)
    assert result.wait_s[0] == 0.0 and result.wait_s[1] == 25.0
    assert np.isnan(result.wait_s[2])
    assert (front.recuts, front.destroyed) == (0, 0)


def test_whole_card_tasks_take_full_instances_only_where_every_card_is_cut() -> None:
    whole = _task(0, 1000, 0, 10, num=2)
    assert timed_request(whole, _pool(2)).devices.partition == "7g.80gb"
    half = _pool(2, 0.5)  # one node: all or nothing; a pool of one node cut at 0.5 rounds
    expected = None if len(half.partitioned) < 2 else "7g.80gb"
    assert timed_request(whole, half).devices.partition == expected
    assert timed_request(_task(1, 300, 0, 10), _pool(2)).devices.partition == "3g.40gb"
    result, front = _run(_pool(2), [whole, _task(1, 1000, 5, 20)])
    assert list(result.wait_s) == [0.0, 5.0]  # the second waits for a 7g to leave
    assert (front.recuts, front.destroyed) == (2, 0)


@pytest.mark.slow
def test_the_timed_study_runs_tiny_as_its_user_runs_it() -> None:
    try:
        default_nodes()
    except TraceNotFound:
        pytest.skip("the Alibaba trace is not beside this checkout")
    cmd = [sys.executable, str(ROOT / "bench" / "partitions.py"), "--timed", "--tasks", "40"]
    cmd += ["--seeds", "1", "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=os.environ, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-4000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["mode"] == "timed" and got["seeds"] == [42]
    rows = {(r["partitioned"], r["cut"]): r for r in got["rows"]}
    assert rows[("none", "shares")]["recuts"] == [0.0, 0.0]
    for mode in ("all", "half"):
        assert rows[(mode, "static")]["recuts"] == [0.0, 0.0]
        assert rows[(mode, "xpupool")]["recuts"][0] > 0
    for row in got["rows"]:
        assert len(row["unallocated_pct_over_time"]) == 10
        assert all(0 <= v <= 100 for v in row["unallocated_pct_over_time"])
        assert row["destroyed"][0] <= row["recuts"][0] * 7  # at most a card's slices each
    assert "A100-80GB xpupool" in got["isolation_price"]
    for mode in ("all", "half"):
        assert set(got["xpupool_minus_hami"][mode]) >= {"unallocated_pct", "recuts"}
        assert 0 <= got["xpupool_minus_hami"][mode]["recuts"][2] <= 1  # seeds lower, of 1


def test_leaving_out_a_profile_the_card_lacks_is_refused_naming_it() -> None:
    try:
        default_nodes()
    except TraceNotFound:
        pytest.skip("the Alibaba trace is not beside this checkout")
    cmd = [sys.executable, str(ROOT / "bench" / "partitions.py"), "--timed", "--tasks", "20"]
    cmd += ["--seeds", "1", "--json", "--leave-out", "4g.40gb,9g.99gb"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=os.environ, cwd=ROOT)
    assert out.returncode != 0 and not out.stdout
    assert "--leave-out: ['9g.99gb'] are not profiles of A100-SXM4-80GB" in out.stderr


@pytest.mark.parametrize("option", ["reservations", "dispatch"])
def test_partitions_are_refused_with_options_that_keep_the_first_engine(option: str) -> None:
    # sites and reservations hold the engine the replay starts with, and a re-cut replaces it
    pool = _pool()
    tasks = [_task(0, 100, 0, 10)]
    workload = TargetWorkload.from_requests(timed_request(t, pool) for t in tasks)
    front = TimedPartitions(pool, CutPolicy("static", static=STATIC), "binpack", 0, workload)
    extra: dict[str, Any] = {
        "reservations": {"reservations": ReservationPlan((), {})},
        "dispatch": {"dispatch": lambda engine: None},
    }[option]
    with pytest.raises(ValueError, match="partitions"):
        timed_replay(pool.nodes, tasks, "binpack", 0, workload, partitions=front, **extra)
