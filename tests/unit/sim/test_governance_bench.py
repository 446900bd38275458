"""``bench/governance.py`` runs end to end at a tiny size, as its user runs it (a command printing
JSON), with figures that make sense. No timing is asserted: the full run's go to docs/benchmarks.md."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from xpupool.sim.trace_files import TraceNotFound, default_nodes

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.slow
def test_governance_bench_compares_both_planners_in_one_run_at_peak_load() -> None:
    try:
        default_nodes()
    except TraceNotFound:
        pytest.skip("the Alibaba trace is not beside this checkout")
    cmd = [sys.executable, str(ROOT / "bench" / "governance.py"), "--tasks", "150", "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=os.environ, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-4000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["copies"] >= 2 and abs(got["peak_demand"] - 1.3) <= 0.02
    for planner in ("today", "checkpoint_aware", "elastic"):
        fig = got[planner]
        assert fig["tasks"] == got["tasks"] == 150 * got["copies"]
        assert 0 < fig["mean_util_pct"] <= fig["peak_util_pct"] <= 100
        assert fig["p95_wait_s"] >= 0 and fig["mean_jct_s"] > 0
        assert 0 <= fig["unallocated_at_peak_pct"] <= 100
        assert fig["gpu_hours_lost"] >= 0 and fig["preemptions"] >= 0
    assert "gpu_hours_lost_change_pct" in got
    assert got["elastic"]["grows"] >= 0 and got["elastic_share"] == 0.5
    assert "elastic_util_change_pts" in got and "elastic_p95_wait_change_pct" in got
    held = got["reservations"]
    assert set(held) >= {"none", "held_idle", "lent", "util_cost_lent_pts"}
    for name in ("held_idle", "lent"):  # held or lent, the booked tasks start on time
        assert held[name]["reserved_start_delay_s"] == [0.0] * held["count"]
        assert held[name]["tasks"] == got["tasks"] + held["count"]
    moved = got["defrag"]  # off and on, on the same load
    assert moved["off"]["tasks"] == moved["on"]["tasks"] == got["tasks"]
    assert "moves" not in moved["off"] and moved["on"]["moves"] >= 0
    assert 0 <= moved["on"]["lost_moves_pct_of_served"] < 100
    assert moved["on"]["gpu_hours_served"] > 0 and "large_mean_wait_change_pct" in moved
    for run in (moved["off"], moved["on"]):
        assert len(run["unallocated_pct_over_time"]) == 10
        assert all(0 <= u <= 100 for u in run["unallocated_pct_over_time"])


def _philly_data(root: Path) -> None:
    """A small Gavel data folder: one job type at scale factors 1 to 8 on every worker type, a
    virtual cluster ``vc`` of 120 jobs over ten hours, and a Philly cluster of 64 V100s."""
    rates = {"('resnet', 1)": 1.0, "('resnet', 2)": 1.8, "('resnet', 4)": 3.4, "('resnet', 8)": 6}
    matrix = {w: {k: {"null": r} for k, r in rates.items()} for w in ("v100", "p100", "k80")}
    (root / "simulation_throughputs.json").write_text(json.dumps(matrix))
    msr = root / "msr"
    (msr / "seed=0").mkdir(parents=True)
    (msr / "cluster_specs.json").write_text(json.dumps({"philly": ["64:0:0"]}))
    rng = random.Random(0)
    lines = [
        f"resnet\tcmd\t-n\t1\t{rng.randint(600, 7200)}\t{300.0 * i:.6f}\t{rng.choice(SIZES)}"
        for i in range(120)
    ]
    (msr / "seed=0" / "vc.trace").write_text("\n".join(lines) + "\n")


SIZES = (1, 1, 2, 4, 8, 16)  # 16 maps to 8, the largest scale factor in the matrix


@pytest.mark.slow
def test_governance_bench_replays_a_philly_trace(tmp_path: Path) -> None:
    _philly_data(tmp_path)
    cmd = [sys.executable, str(ROOT / "bench" / "governance.py"), "--json", "--philly", "vc"]
    cmd += ["--philly-classes", "--gavel-data", str(tmp_path)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=os.environ, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-4000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["trace"] == "msr/seed=0/vc.trace" and got["gpus"] == 64 and got["nodes"] == 8
    assert abs(got["peak_demand"] - 1.3) <= 0.02 and got["tasks"] == 120 * got["copies"]
    for planner in ("today", "checkpoint_aware", "elastic"):
        assert got[planner]["tasks"] == got["tasks"]
        assert 0 <= got[planner]["unallocated_at_peak_pct"] <= 100
    assert got["elastic"]["grows"] > 0  # jobs of 2 or more cards are elastic
    assert "elastic_util_at_peak_change_pts" in got
    held = got["reservations"]
    for name in ("held_idle", "lent"):
        assert held[name]["reserved_start_delay_s"] == [0.0] * held["count"]
    assert {"util_at_peak_cost_held_idle_pts", "util_at_peak_cost_lent_pts"} <= set(held)
    assert got["defrag"]["on"]["tasks"] == got["tasks"]


def test_governance_bench_refuses_an_unknown_philly_trace(tmp_path: Path) -> None:
    _philly_data(tmp_path)
    cmd = [sys.executable, str(ROOT / "bench" / "governance.py"), "--philly", "nope"]
    cmd += ["--gavel-data", str(tmp_path)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=os.environ, cwd=ROOT)
    assert out.returncode == 2 and "--philly" in out.stderr and "nope" in out.stderr
