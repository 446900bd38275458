"""``bench/fair_share.py`` runs end to end at a tiny size, as its user runs it (a command printing
JSON), with per-tenant figures for both orders. No timing or wait is asserted: the full run's
figures go to docs/benchmarks.md."""

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
def test_fair_share_bench_gives_each_tenants_waits_under_both_orders() -> None:
    try:
        default_nodes()
    except TraceNotFound:
        pytest.skip("the Alibaba trace is not beside this checkout")
    cmd = [sys.executable, str(ROOT / "bench" / "fair_share.py"), "--tasks", "150", "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=os.environ, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-4000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert abs(got["peak_demand"] - 1.3) <= 0.02
    for order in ("drf", "history"):
        tenants = got[order]["tenants"]
        assert set(tenants) == {"steady", "bursty"}
        assert sum(t["tasks"] for t in tenants.values()) == got["tasks"]
        assert abs(tenants["steady"]["tasks"] - tenants["bursty"]["tasks"]) <= 1  # alternated
        assert all(row["mean_wait_s"] >= 0 and row["p95_wait_s"] >= 0 for row in tenants.values())
    for tenant in ("steady", "bursty"):  # both orders replay the same tasks
        assert got["drf"]["tenants"][tenant]["tasks"] == got["history"]["tenants"][tenant]["tasks"]
