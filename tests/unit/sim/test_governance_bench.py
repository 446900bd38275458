"""``bench/governance.py`` runs end to end at a tiny size, as its user runs it (a command printing
JSON), with figures that make sense. No timing is asserted: the full run's go to docs/benchmarks.md."""

from __future__ import annotations

import json
import os
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
