"""The partition replay on hand-built pools: task mapping, static layouts, re-cuts that keep what
runs, and the study's command at a tiny size (figures that make sense; none asserted as timing)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from xpupool.catalog.partition_geometry import Instance, Layout
from xpupool.catalog.partitions import PartitionScheme
from xpupool.engine.fragmentation import TargetWorkload
from xpupool.engine.partition_recut import recut_choice
from xpupool.model import Device, Node
from xpupool.sim.alibaba import TraceTask
from xpupool.sim.partition_replay import (
    CutPolicy,
    mig_pool,
    partition_replay,
    profile_for,
    task_requests,
)
from xpupool.sim.trace_files import TraceNotFound, default_nodes

from factories import partition_scheme

Card = tuple[Layout, frozenset[Instance]]
Choice = tuple[int, Layout] | None
ROOT = Path(__file__).resolve().parents[3]


A100 = partition_scheme("A100-SXM4-80GB")


def _task(i: int, milli: int, num: int = 1) -> TraceTask:
    return TraceTask(f"t{i}", 1000, 1024, num, milli, ("V100M32",))


def _nodes(n: int, cards: int = 1) -> list[Node]:
    return [
        Node(
            f"n{i}",
            64_000,
            256 * 1024,
            tuple(
                Device(f"n{i}-gpu{j}", "nvidia", "V100M32", 32768, index=j) for j in range(cards)
            ),
        )
        for i in range(n)
    ]


def _workload(tasks: list[TraceTask]) -> TargetWorkload:
    return TargetWorkload.from_requests(task_requests(t, A100)[0] for t in tasks)


def test_tasks_take_the_smallest_profile_with_enough_slices() -> None:
    assert profile_for(A100, 100) == "1g.10gb"  # ceil(0.7) = 1 slice
    assert profile_for(A100, 300) == "3g.40gb"  # ceil(2.1) = 3
    assert profile_for(A100, 500) == "4g.40gb"  # ceil(3.5) = 4
    assert profile_for(A100, 800) == "7g.80gb"  # ceil(5.6) = 6: no 6g, the 7g
    cut, share = task_requests(_task(0, 300), A100)
    assert cut.devices.partition == "3g.40gb" and share.devices.partition is None
    assert share.devices.models == ()  # the trace's model names go with its cards
    whole, full = task_requests(_task(1, 1000, 2), A100)
    assert whole.devices.partition is None and full.devices.partition == "7g.80gb"
    assert full.devices.count == 2
    assert task_requests(_task(0, 300), None) == (share,)


def test_mig_pool_replaces_every_card_and_partitions_the_share_of_nodes_asked() -> None:
    mix = (("A100-SXM4-80GB", 0.5), ("H100-SXM5-80GB", 0.5))
    pool = mig_pool(_nodes(10, 2), mix, 0.5, seed=42)
    models = [n.devices[0].model for n in pool.nodes]
    assert sorted(set(models)) == ["A100-SXM4-80GB", "H100-SXM5-80GB"]
    assert models.count("A100-SXM4-80GB") == 5
    assert len(pool.partitioned) == 10  # 5 nodes x 2 cards
    assert mig_pool(_nodes(10, 2), mix, 0.5, seed=42) == pool  # seeded


def test_static_layouts_never_re_cut_and_refuse_what_their_mix_lacks() -> None:
    pool = mig_pool(_nodes(1), (("A100-SXM4-80GB", 1.0),), 1.0, seed=0)
    tasks = [_task(0, 100), _task(1, 800)]  # a 1g fits the static mix, a 7g does not
    static = CutPolicy("static", static=(("4g.40gb", 0), ("2g.20gb", 4), ("1g.10gb", 6)))
    run = partition_replay(pool, tasks, "binpack", static, 0, _workload(tasks))
    assert (run.failed, run.recuts, run.destroyed) == (1, 0, 0)


def test_the_re_cut_rule_cuts_idle_slices_and_keeps_what_runs() -> None:
    pool = mig_pool(_nodes(1), (("A100-SXM4-80GB", 1.0),), 1.0, seed=0)
    tasks = [_task(0, 100), _task(1, 400), _task(2, 100), _task(3, 800)]
    workload = _workload(tasks)

    def rule(scheme: PartitionScheme, cards: Sequence[Card], profile: str) -> Choice:
        return recut_choice(scheme, cards, profile, workload)

    run = partition_replay(pool, tasks, "binpack", CutPolicy("x", rule=rule), 0, workload)
    # the 1g's cut fills the card with 1g (half the workload); the 3g's cut destroys three free
    # 1g for it; the second 1g takes a free one: two cuts; the 7g cannot be had while they run
    assert (run.failed, run.recuts, run.destroyed) == (1, 2, 3)
    # placed: 100 + 400 + 100 of the card's 1000
    assert run.unallocated_pct == pytest.approx(40.0)


@pytest.mark.slow
def test_the_study_runs_tiny_as_its_user_runs_it() -> None:
    try:
        default_nodes()
    except TraceNotFound:
        pytest.skip("the Alibaba trace is not beside this checkout")
    cmd = [sys.executable, str(ROOT / "bench" / "partitions.py"), "--tasks", "60"]
    cmd += ["--seeds", "2", "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=os.environ, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-4000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["seeds"] == [42, 43]
    rows = {(r["mix"], r["partitioned"], r["cut"]): r for r in got["rows"]}
    for mix in ("A100-80GB", "A100-80GB+H100-80GB 1:1"):
        assert rows[(mix, "none", "shares")]["recuts"] == [0.0, 0.0]
        for mode in ("all", "half"):
            assert rows[(mix, mode, "static")]["recuts"] == [0.0, 0.0]
            assert rows[(mix, mode, "xpupool")]["recuts"][0] > 0
        for row in (r for r in got["rows"] if r["mix"] == mix):
            assert 0 <= row["unallocated_pct"][0] <= 100
    assert "A100-80GB xpupool" in got["isolation_price"]
